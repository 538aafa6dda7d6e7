//! Whole trees and many files in one transfer (the file plane beyond one file).
//!
//! The sending end lists its sources ([`walk`]) into a manifest ([`manifest::Entry`]: path,
//! kind, size, time, mode, link target), which travels on the request's stream before the data.
//! The receiving end decides where each entry goes and which files move under its overwrite
//! policy ([`plan`]), creates the directories and a temporary file per moving file
//! ([`Plan::prepare`]), and answers with the numbers of the files it wants. Both ends then lay
//! the wanted files end to end in one offset space ([`FileSet`]) and the data channels move
//! that space exactly as they move one file: many small files share packets and chunks, with
//! no round trip and no set-up per file. Each file's BLAKE3 is computed by both ends as the
//! bytes move; the receiver renames a file into place only when its hash matches the
//! sender's ([`Incoming::commit`]).

pub(crate) mod claim;
pub mod fileset;
pub mod incoming;
pub mod list;
pub use sluice_session::manifest;
pub mod resume;
pub mod walk;

pub use fileset::FileSet;
pub use incoming::{
    Committed, Incoming, Overwrite, Plan, PlanError, ReceiveOptions, ResumeKeeper, plan,
};
pub use list::{Listing, list};
pub use manifest::{Entry, EntryKind};
pub use walk::{Links, Outgoing, WalkError, WalkOptions, walk};
