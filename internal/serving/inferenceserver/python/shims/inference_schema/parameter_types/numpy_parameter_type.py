"""NumpyParameterType: a JSON array becomes a numpy array of the sample's
dtype (records, for a structured dtype), its shape checked past the first
dimension."""

from .abstract_parameter_type import AbstractParameterType


class NumpyParameterType(AbstractParameterType):
    def __init__(self, sample_input, enforce_column_type=True, enforce_shape=True):
        super(NumpyParameterType, self).__init__(sample_input)
        self.enforce_column_type = enforce_column_type
        self.enforce_shape = enforce_shape

    def deserialize_input(self, input_data):
        import numpy as np

        dtype = self.sample_input.dtype if self.enforce_column_type else None
        if dtype is not None and dtype.names:
            rows = [tuple(r[n] for n in dtype.names) if isinstance(r, dict) else tuple(r) for r in input_data]
            arr = np.array(rows, dtype=dtype)
        else:
            arr = np.array(input_data, dtype=dtype)
        if self.enforce_shape and arr.shape[1:] != self.sample_input.shape[1:]:
            raise ValueError("input has shape %s; the schema's sample has %s (past the first dimension)"
                             % (arr.shape, self.sample_input.shape))
        return arr
