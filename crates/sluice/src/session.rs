//! The session plane over QUIC (work in progress, issue 3).
