//! germline policy core (placeholder, filled by issue 2).
