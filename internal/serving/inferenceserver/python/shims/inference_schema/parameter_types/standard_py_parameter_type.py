"""StandardPythonParameterType: plain JSON values, converting nested
parameter types inside a dict or list sample."""

from .abstract_parameter_type import AbstractParameterType


class StandardPythonParameterType(AbstractParameterType):
    def deserialize_input(self, input_data):
        sample = self.sample_input
        if isinstance(sample, dict) and isinstance(input_data, dict):
            out = dict(input_data)
            for key, sub in sample.items():
                if isinstance(sub, AbstractParameterType) and key in out:
                    out[key] = sub.deserialize_input(out[key])
            return out
        if isinstance(sample, (list, tuple)) and sample and isinstance(sample[0], AbstractParameterType) \
                and isinstance(input_data, list):
            return [sample[0].deserialize_input(x) for x in input_data]
        return input_data
