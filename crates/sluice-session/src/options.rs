//! The options of a request that travel on the wire: how the sending end treats symbolic links
//! and how the receiving end treats files that exist.

use serde::{Deserialize, Serialize};

/// What to do with symbolic links inside a tree (a source named on the command line is always
/// followed, as `cp -r` and `scp -r` do).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Links {
    /// Leave them out, with a warning.
    Skip,
    /// Recreate them as links with the same target (the receiving server refuses targets that
    /// leave its root).
    #[default]
    Copy,
    /// Move what they point to. A serving end follows only links that stay inside its root;
    /// a directory reached twice is moved once.
    Follow,
}

impl Links {
    /// Parses `skip`, `copy` or `follow`.
    pub fn from_name(name: &str) -> Option<Links> {
        match name {
            "skip" => Some(Links::Skip),
            "copy" => Some(Links::Copy),
            "follow" => Some(Links::Follow),
            _ => None,
        }
    }
}

/// What to do when a file of the manifest exists at the destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Overwrite {
    /// Refuse the whole transfer, naming the files that exist (the default).
    #[default]
    Refuse,
    /// Keep the existing file; move the others.
    Never,
    /// Replace it.
    Always,
    /// Replace it when the source's modification time is later.
    IfNewer,
    /// Replace it unless size and modification time (or, with `checksum`, the BLAKE3) match.
    IfDifferent,
}

impl Overwrite {
    /// Parses `never`, `always`, `if-newer` or `if-different`.
    pub fn from_name(name: &str) -> Option<Overwrite> {
        match name {
            "never" => Some(Overwrite::Never),
            "always" => Some(Overwrite::Always),
            "if-newer" => Some(Overwrite::IfNewer),
            "if-different" => Some(Overwrite::IfDifferent),
            _ => None,
        }
    }
}
