//! The file operations of the web app (`sluice serve --web`), each held to a token's
//! [`Access`](crate::session::Access) exactly as a QUIC request is: the right it needs first,
//! then its path resolved beneath the token's root, then every file step beneath that root
//! through [`Confined`](crate::files::Confined) (`openat2(RESOLVE_BENEATH)`).
//!
//! Which right governs what:
//!
//! | operation                          | right                                          |
//! |------------------------------------|------------------------------------------------|
//! | list a directory, stat a path      | `list` (stat: `list` or `read`, as `sluice stat`) |
//! | download a file, hash it (BLAKE3)  | `read`                                         |
//! | upload a file, make a folder       | `write`                                        |
//! | rename, delete (folders: recursively) | `write`: an upload with `--overwrite always` replaces files already |
//!
//! Paths are the client's, relative to the token's root, `/`-separated; errors name them as the
//! client gave them, never the server's own layout. Everything here blocks: call it on a
//! blocking thread.

mod download;
mod fetch;
mod ops;
mod pace;
mod partial;
mod store;
mod upload;

pub use download::{Download, file_hash, open_download};
pub use fetch::{Fetched, download_tree, send_files};
pub use ops::{delete, make_dir, rename};
pub use pace::Pace;
pub use store::{Stored, Target, receive_files};
pub use upload::{
    PARTIAL_TTL, PARTIALS_MAX, Partials, Policy, Upload, UploadDone, UploadSpec, UploadStatus,
    stop_upload, upload_status,
};
