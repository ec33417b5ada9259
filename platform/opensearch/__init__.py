"""OpenSearch room: the managed local node, its artefacts (distribution, plugins) and the client connection."""
