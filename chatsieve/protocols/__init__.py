"""Client API protocols, each a sans-I/O module: its request shape in, the one internal
request out; parser events in, its own chunks and final body out."""
