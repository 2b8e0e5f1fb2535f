"""input_schema and output_schema, as inference_schema.schema_decorators has
them. Ferry's server reads the names recorded here: with an input schema, it
parses the request body as a JSON object and calls run() with its keys as
keyword arguments, as Azure's server does."""

import functools
import inspect


def _schema(func):
    return dict(getattr(func, "_ferry_schema", None) or {"input": {}, "output": None})


def input_schema(param_name, param_type, convert_to_provided_type=True, optional=False):
    """Declare run()'s parameter param_name and convert it with param_type."""

    def decorator(func):
        try:
            positions = list(inspect.signature(func).parameters)
        except (TypeError, ValueError):
            positions = []

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if convert_to_provided_type:
                if param_name in kwargs:
                    kwargs[param_name] = param_type.deserialize_input(kwargs[param_name])
                elif param_name in positions and positions.index(param_name) < len(args):
                    i = positions.index(param_name)
                    args = args[:i] + (param_type.deserialize_input(args[i]),) + args[i + 1:]
            return func(*args, **kwargs)

        schema = _schema(func)
        schema["input"] = dict(schema["input"])
        schema["input"][param_name] = param_type
        wrapper._ferry_schema = schema
        return wrapper

    return decorator


def output_schema(output_type):
    """Declare run()'s output; recorded, not enforced (as in Azure)."""

    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            return func(*args, **kwargs)

        schema = _schema(func)
        schema["output"] = output_type
        wrapper._ferry_schema = schema
        return wrapper

    return decorator
