"""Parameter types of Ferry's inference_schema stand-in."""
