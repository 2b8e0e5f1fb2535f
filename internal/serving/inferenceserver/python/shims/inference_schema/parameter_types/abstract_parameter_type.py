"""The base of every parameter type."""


class AbstractParameterType(object):
    """A sample input, and how a JSON value becomes that kind of value."""

    def __init__(self, sample_input):
        self.sample_input = sample_input

    def deserialize_input(self, input_data):
        return input_data

    def input_to_swagger(self):
        return {}
