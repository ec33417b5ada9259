"""Native retrieval: the method registry and its built-ins, query bodies, `retrieve` (a query set searched
in an index, stored as a run) and the fusion-weight sweep (which runs retrievals, so it sits here, above fusion)."""
