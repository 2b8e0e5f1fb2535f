"""Ferry's stand-in for the inference-schema package: the decorators and
parameter types that Azure scoring scripts use, converting inputs as the
real package does. Standard library only; numpy and pandas are imported
only when a script uses their parameter types (and so has them)."""
