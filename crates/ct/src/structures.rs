//! RFC 6962 structures and their exact encodings.
