"""Pure formulas (shape, parameters, FLOPs, memory, step time) and the layout search of `launch plan`."""
