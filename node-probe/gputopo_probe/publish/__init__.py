"""Publishing a node's topology: NodeTopology status, Node labels, Events, HTTP endpoints."""
