"""Live tokens: the side channel from a worker's model requests to a query's caller, the
keys that seal it, and the feeds an attached reader follows."""
