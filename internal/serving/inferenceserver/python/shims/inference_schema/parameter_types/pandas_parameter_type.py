"""PandasParameterType: JSON records (or another orient) become a
DataFrame with the sample's columns and, where they convert, its dtypes."""

from .abstract_parameter_type import AbstractParameterType


class PandasParameterType(AbstractParameterType):
    def __init__(self, sample_input, enforce_column_type=True, enforce_shape=True,
                 apply_column_names=False, orient="records"):
        super(PandasParameterType, self).__init__(sample_input)
        self.enforce_column_type = enforce_column_type
        self.enforce_shape = enforce_shape
        self.apply_column_names = apply_column_names
        self.orient = orient

    def deserialize_input(self, input_data):
        import pandas as pd

        if isinstance(input_data, dict) and self.orient not in ("records", "values"):
            df = pd.DataFrame.from_dict(input_data, orient="index" if self.orient == "index" else "columns")
        else:
            df = pd.DataFrame(input_data)
        if self.apply_column_names or (len(df.columns) == len(self.sample_input.columns)
                                       and list(df.columns) == list(range(len(df.columns)))):
            df.columns = self.sample_input.columns
        if self.enforce_column_type:
            for col, dt in self.sample_input.dtypes.items():
                if col in df.columns:
                    try:
                        df[col] = df[col].astype(dt)
                    except (TypeError, ValueError):
                        pass
        return df
