//! The receiving end of a manifest: where each entry goes, what the overwrite policy keeps,
//! the temporary files the data lands in, and the commit once the hashes are known.
//!
//! Nothing is written under a final name before its BLAKE3 matched: files arrive in
//! `.<name>.sluice-part-<hex>` beside their final path and are renamed there one by one in
//! [`Incoming::commit`]; links are made after every file, so no write ever goes through a link
//! this transfer made. One `syncfs` makes the whole commit durable.
//!
//! A partial file belongs to the transfer writing it: [`Plan::prepare`] claims each wanted
//! file's path ([`super::claim`]) before it looks for a partial file to resume or creates one,
//! and a path another live transfer writes (in this process or another) is refused as busy
//! ([`PlanError::Busy`]). The claims are held until the [`Incoming`] is dropped, after its
//! commit.

use std::collections::HashSet;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::claim::{ClaimError, Claims};
use super::fileset::FileSet;
use super::manifest::{self, BadEntry, Entry, EntryKind};
use super::resume::{self, RECORD_EVERY, RESUME_MIN_BYTES};
use crate::files::{Confined, hash_prefix, parent_dir, random_u64, temp_name};

pub use sluice_session::options::Overwrite;

/// The receiving end's choices.
#[derive(Debug, Clone, Default)]
pub struct ReceiveOptions {
    /// Existing files.
    pub overwrite: Overwrite,
    /// `IfDifferent` compares BLAKE3 (the manifest carries the sender's) instead of size and
    /// modification time.
    pub checksum: bool,
    /// Keep the sender's permission bits (without setuid, setgid and sticky) and
    /// modification times; else files get 0644 (0755 if the source was executable) and
    /// directories the process's default (0777 less the umask), and the time of their arrival.
    pub preserve: bool,
    /// Everything must stay inside this directory (a server's root): existing directories
    /// that lead elsewhere and links whose target leaves it are refused.
    pub confine: Option<PathBuf>,
    /// Called with each wanted file of at least [`RESUME_MIN_BYTES`] once its path is claimed,
    /// before its resume record is looked for: it may leave a temporary file and a record of
    /// it there, which the resume then offers like any other (the web app's upload takes over
    /// its HTTPS partial file of the same source this way: `sluice::web`). A failure in it
    /// only costs the resume.
    pub adopt: Option<Adopt>,
}

/// A hook of [`ReceiveOptions::adopt`]: the steps on disk, the claimed target, its entry.
pub type Adopt = fn(&Confined, &Path, &Entry);

/// Why a manifest cannot be received.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The peer's manifest is malformed.
    #[error(transparent)]
    Bad(#[from] BadEntry),
    /// Several top-level names and a destination that is not a directory.
    #[error("{0}")]
    NotADirectory(String),
    /// The destination's directory does not exist.
    #[error("{0}")]
    NotFound(String),
    /// Files exist and the policy refuses to replace them, or an entry collides with
    /// something of another kind, or leaves the confining directory.
    #[error("{0}")]
    Refused(String),
    /// Reading the destination failed.
    #[error("{0}: {1}")]
    Io(String, #[source] io::Error),
    /// Another live transfer writes the path of a wanted file (named): [`Plan::prepare`]
    /// could not claim it.
    #[error("{0}")]
    Busy(String),
}

/// The decisions for one manifest: where each entry goes and which files move.
#[derive(Debug)]
pub struct Plan {
    entries: Vec<Entry>,
    targets: Vec<PathBuf>,
    /// Entry index of each file of the manifest (the file numbering), in order.
    files: Vec<usize>,
    /// Numbers of the files that move.
    wanted: Vec<u32>,
    /// Links to make (entry indices).
    links: Vec<usize>,
    /// Existing files that will be replaced.
    pub replaced: u64,
    /// Existing files kept by the policy.
    pub kept: u64,
    /// Directories to create or keep (entry indices).
    dirs: Vec<usize>,
    preserve: bool,
    adopt: Option<Adopt>,
    /// The steps on disk, beneath the root when confined.
    fs: Confined,
}

/// Decides where every entry of `entries` goes under `dest` and which files move.
///
/// Placement is scp's: into `dest` when it is an existing directory; else, for a manifest with
/// one top-level name, `dest` takes that name's place (a single file lands at `dest`).
pub fn plan(dest: &Path, entries: Vec<Entry>, options: &ReceiveOptions) -> Result<Plan, PlanError> {
    manifest::check(&entries)?;
    let shown = |p: &Path| p.display().to_string();
    let tops: HashSet<&str> =
        entries.iter().map(|e| e.path.split('/').next().unwrap_or("")).collect();
    let fs = Confined::new(options.confine.as_deref())
        .map_err(|e| PlanError::Io("the served directory".into(), e))?;
    let into_dir = fs.is_dir(dest);
    if !into_dir {
        if tops.len() > 1 {
            return Err(PlanError::NotADirectory(format!(
                "{} is not a directory, and {} sources need one",
                shown(dest),
                tops.len()
            )));
        }
        if !fs.is_dir(parent_dir(dest)) {
            return Err(PlanError::NotFound(format!(
                "{}: its directory does not exist",
                shown(dest)
            )));
        }
    }
    let mut plan = Plan {
        fs,
        targets: Vec::with_capacity(entries.len()),
        files: Vec::new(),
        wanted: Vec::new(),
        links: Vec::new(),
        replaced: 0,
        kept: 0,
        dirs: Vec::new(),
        preserve: options.preserve,
        adopt: options.adopt,
        entries: Vec::new(),
    };
    let mut existing = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let target = if into_dir {
            dest.join(&entry.path)
        } else {
            match entry.path.split_once('/') {
                Some((_, rest)) => dest.join(rest),
                None => dest.to_owned(),
            }
        };
        let found = match plan.fs.symlink_metadata(&target) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(PlanError::Io(entry.path.clone(), e)),
        };
        let refused = |why: &str| PlanError::Refused(format!("{}: {why}", entry.path));
        match entry.kind {
            EntryKind::Dir => {
                if let Some(meta) = &found {
                    let is_dir = if meta.file_type().is_symlink() {
                        let real = target.canonicalize().ok();
                        if let (Some(root), Some(real)) = (&options.confine, &real)
                            && !real.starts_with(root)
                        {
                            return Err(refused("a link leading outside the served directory"));
                        }
                        real.is_some_and(|r| r.is_dir())
                    } else {
                        meta.is_dir()
                    };
                    if !is_dir {
                        return Err(refused("exists and is not a directory"));
                    }
                }
                plan.dirs.push(i);
            }
            EntryKind::File | EntryKind::Symlink => {
                let number = plan.files.len() as u32;
                let move_it = match &found {
                    None => true,
                    Some(meta) if meta.is_dir() => {
                        return Err(refused("exists and is a directory"));
                    }
                    Some(meta) => match options.overwrite {
                        Overwrite::Refuse => {
                            existing.push(entry.path.clone());
                            false
                        }
                        Overwrite::Never => false,
                        Overwrite::Always => true,
                        Overwrite::IfNewer => entry.mtime > meta.mtime(),
                        Overwrite::IfDifferent => {
                            differs(&plan.fs, entry, &target, meta, options.checksum)
                        }
                    },
                };
                if entry.kind == EntryKind::Symlink
                    && let Some(root) = &options.confine
                    && !stays_inside(
                        root,
                        parent_dir(&target),
                        entry.target.as_deref().unwrap_or(""),
                    )
                {
                    return Err(refused("a link whose target leaves the served directory"));
                }
                match (move_it, found.is_some()) {
                    (true, true) => plan.replaced += 1,
                    (false, true) => plan.kept += 1,
                    _ => {}
                }
                if entry.kind == EntryKind::File {
                    plan.files.push(i);
                    if move_it {
                        plan.wanted.push(number);
                    }
                } else if move_it {
                    plan.links.push(i);
                }
            }
        }
        plan.targets.push(target);
    }
    if !existing.is_empty() {
        let shown: Vec<&str> = existing.iter().take(3).map(String::as_str).collect();
        return Err(PlanError::Refused(format!(
            "{} file{} already exist{} at the destination ({}{}): choose --overwrite \
             never|always|if-newer|if-different",
            existing.len(),
            if existing.len() == 1 { "" } else { "s" },
            if existing.len() == 1 { "s" } else { "" },
            shown.join(", "),
            if existing.len() > 3 { ", ..." } else { "" }
        )));
    }
    plan.entries = entries;
    Ok(plan)
}

/// Whether `IfDifferent` replaces the existing file at `target`.
fn differs(
    fs: &Confined,
    entry: &Entry,
    target: &Path,
    meta: &std::fs::Metadata,
    checksum: bool,
) -> bool {
    if entry.kind == EntryKind::Symlink {
        let same = meta.file_type().is_symlink()
            && fs
                .read_link(target)
                .is_ok_and(|t| Some(t.as_os_str()) == entry.target.as_deref().map(|t| t.as_ref()));
        return !same;
    }
    if !meta.is_file() || meta.len() != entry.size {
        return true;
    }
    if !checksum {
        return meta.mtime() != entry.mtime;
    }
    let Some(theirs) = entry.blake3.as_deref().and_then(|h| blake3::Hash::from_hex(h).ok()) else {
        return true;
    };
    let ours = (fs.open(target, false))
        .and_then(|f| hash_prefix(&f, entry.size, &std::sync::atomic::AtomicBool::new(false)));
    !matches!(ours, Ok(Some(h)) if h == theirs)
}

/// Whether a link at `link_dir` with `target` resolves (lexically) inside `root`.
fn stays_inside(root: &Path, link_dir: &Path, target: &str) -> bool {
    if target.starts_with('/') {
        return false;
    }
    // The link's directory may not exist yet (this transfer makes it): resolve the part that
    // exists, then add the rest, which is the manifest's checked components.
    let mut existing = link_dir;
    let mut rest = Vec::new();
    let mut at = loop {
        match existing.canonicalize() {
            Ok(dir) => break dir,
            Err(_) => match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name);
                    existing = parent;
                }
                _ => return false,
            },
        }
    };
    at.extend(rest.iter().rev());
    for part in Path::new(target).components() {
        match part {
            Component::Normal(p) => at.push(p),
            Component::ParentDir => {
                if !at.pop() {
                    return false;
                }
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    at.starts_with(root)
}

impl Plan {
    /// Numbers of the files that move, in order.
    pub fn wanted(&self) -> &[u32] {
        &self.wanted
    }

    /// Bytes the wanted files hold.
    pub fn wanted_bytes(&self) -> u64 {
        self.wanted.iter().map(|&n| self.entries[self.files[n as usize]].size).sum()
    }

    /// The manifest's paths of the wanted files (for a dry run).
    pub fn wanted_paths(&self) -> impl Iterator<Item = &str> {
        self.wanted.iter().map(|&n| self.entries[self.files[n as usize]].path.as_str())
    }

    /// Creates the directories, claims the path of every wanted file, and makes it a temporary
    /// file: the one an interrupted transfer of the same source left, to continue, or a new one.
    /// A path that another live transfer writes is refused ([`PlanError::Busy`]): nothing of
    /// that transfer's is touched, and this one stops before any data moves.
    pub fn prepare(self) -> Result<Incoming, PlanError> {
        self.prepare_with(|incoming, k| {
            let i = incoming.plan.files[incoming.plan.wanted[k] as usize];
            let (entry, target) = (&incoming.plan.entries[i], &incoming.plan.targets[i]);
            let io_err = |e| PlanError::Io(target.display().to_string(), e);
            // Claimed: a partial file and record of this path are an ended transfer's.
            let resumable = (entry.size >= RESUME_MIN_BYTES)
                .then(|| {
                    if let Some(adopt) = incoming.plan.adopt {
                        adopt(&incoming.plan.fs, target, entry);
                    }
                    resume::find(&incoming.plan.fs, target, entry)
                })
                .flatten();
            if let Some(resumable) = resumable {
                let hashes = (incoming.plan.fs.open(&resumable.temp, false))
                    .and_then(|f| resume::block_hashes(&f, resumable.prefix))
                    .map_err(io_err)?;
                incoming.temps.push(resumable.temp);
                incoming.offers.push((k as u32, hashes));
                return Ok(());
            }
            let name = target.file_name().unwrap_or(target.as_os_str());
            let random = random_u64().map_err(io_err)?;
            let temp = parent_dir(target).join(temp_name(name, random));
            let file = incoming.plan.fs.create_new(&temp, 0o600).map_err(io_err)?;
            incoming.temps.push(temp);
            file.set_len(entry.size).map_err(io_err)
        })
    }

    /// As [`Plan::prepare`], but the wanted files' temporary files are `temps` (one per wanted
    /// file, in order), which an earlier [`Incoming`] of the same plan made and kept (a
    /// relayed tree's collection that a server restart interrupted). Each must be a temporary
    /// name of its file's (beside it, `.<name>.sluice-part-<hex>`), a regular file of the
    /// entry's size; otherwise the plan is refused before any of `temps` is taken (so none is
    /// removed). Once taken they are the plan's: a claim refused after that drops the plan,
    /// which removes those taken, as it would its own.
    pub fn adopt(self, temps: &[PathBuf]) -> Result<Incoming, PlanError> {
        if temps.len() != self.wanted.len() {
            return Err(PlanError::Refused(format!(
                "{} temporary files for {} files",
                temps.len(),
                self.wanted.len()
            )));
        }
        for (k, temp) in temps.iter().enumerate() {
            let i = self.files[self.wanted[k] as usize];
            let (entry, target) = (&self.entries[i], &self.targets[i]);
            let name = target.file_name().unwrap_or(target.as_os_str());
            let random = temp
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.len().checked_sub(16).and_then(|at| n.get(at..)))
                .and_then(|hex| u64::from_str_radix(hex, 16).ok());
            let named = random.is_some_and(|r| {
                temp.parent() == Some(parent_dir(target))
                    && temp.file_name() == Some(temp_name(name, r).as_os_str())
            });
            let fits = self
                .fs
                .symlink_metadata(temp)
                .is_ok_and(|m| m.file_type().is_file() && m.len() == entry.size);
            if !(named && fits) {
                return Err(PlanError::Refused(format!(
                    "{}: not the temporary file of {} it was",
                    temp.display(),
                    target.display()
                )));
            }
        }
        self.prepare_with(|incoming, k| {
            incoming.temps.push(temps[k].clone());
            Ok(())
        })
    }

    /// Creates the directories, claims the path of every wanted file, and gives each its
    /// temporary file with `temp` (which pushes it onto the plan's).
    fn prepare_with(
        self,
        mut temp: impl FnMut(&mut Incoming, usize) -> Result<(), PlanError>,
    ) -> Result<Incoming, PlanError> {
        let io_err = |p: &Path, e| PlanError::Io(p.display().to_string(), e);
        for &i in &self.dirs {
            let target = &self.targets[i];
            match self.fs.create_dir(target) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && self.fs.is_dir(target) => {}
                Err(e) => return Err(io_err(target, e)),
            }
        }
        let mut incoming = Incoming {
            temps: Vec::with_capacity(self.wanted.len()),
            offers: Vec::new(),
            committed: 0,
            claims: Claims::new(self.fs.clone()),
            plan: self,
        };
        for k in 0..incoming.plan.wanted.len() {
            let target =
                &incoming.plan.targets[incoming.plan.files[incoming.plan.wanted[k] as usize]];
            incoming.claims.claim(target).map_err(|e| match e {
                ClaimError::Busy => PlanError::Busy(format!(
                    "{}: another transfer is writing it; try again when that one ends",
                    target.display()
                )),
                ClaimError::Foreign(name) => PlanError::Refused(format!(
                    "{}: {} is in the way and is not a lock of sluice's (remove it)",
                    target.display(),
                    name.display()
                )),
                ClaimError::Io(e) => io_err(target, e),
            })?;
            temp(&mut incoming, k)?;
        }
        Ok(incoming)
    }
}

/// A manifest being received: its directories exist, its wanted files are temporary files and
/// their paths are claimed. Dropped before [`Incoming::commit`] finished, the temporary files
/// left are removed, except those a resume record names (an interrupted transfer's, for the next
/// run to continue); dropped at all, it gives up its claims.
#[derive(Debug)]
pub struct Incoming {
    plan: Plan,
    /// One per wanted file.
    temps: Vec<PathBuf>,
    /// Resumed files: (index among the wanted files, hashes of the blocks on disk).
    offers: Vec<(u32, Vec<blake3::Hash>)>,
    /// Temporary files at the front of `temps` already renamed or removed.
    committed: usize,
    /// The wanted files' paths, this transfer's until it is dropped (after the temporary
    /// files' removal).
    claims: Claims,
}

/// What a commit stored.
#[derive(Debug, Default, Clone)]
pub struct Committed {
    /// Files renamed into place.
    pub files: u64,
    /// Links made.
    pub links: u64,
    /// Files whose bytes did not match the sender's BLAKE3 (their paths), not stored.
    pub mismatched: Vec<String>,
}

impl Incoming {
    /// What an interrupted transfer left: (index among the wanted files, BLAKE3 of each block
    /// of its leading bytes on disk), for the sender to check.
    pub fn offers(&self) -> &[(u32, Vec<blake3::Hash>)] {
        &self.offers
    }

    /// The ranges of the offset space already on disk, from the sender's verdict on the offers:
    /// `(index among the wanted files, leading bytes kept)`. A verdict that claims more than was
    /// offered is refused.
    pub fn present(&self, kept: &[(u32, u64)]) -> Result<Vec<std::ops::Range<u64>>, String> {
        let store = self.store();
        let mut ranges = Vec::new();
        for &(k, bytes) in kept {
            let offered = self.offers.iter().find(|(o, _)| *o == k).map(|(_, h)| h.len() as u64);
            let (_, size, base) =
                store.file_at(k as usize).ok_or("a kept file that is not wanted")?;
            let most = offered
                .ok_or("a kept file that was not offered")?
                .saturating_mul(resume::RESUME_BLOCK_BYTES);
            if bytes > most.min(size) {
                return Err(format!("{bytes} bytes kept of file {k}, more than offered"));
            }
            if bytes > 0 {
                ranges.push(base..base + bytes);
            }
        }
        Ok(ranges)
    }

    /// Keeps resume records of the large files up to date as the written prefix of the
    /// offset space grows (call [`ResumeKeeper::update`] with it).
    pub fn keeper(&self) -> ResumeKeeper {
        let store = self.store();
        let mut files = Vec::new();
        for (k, &n) in self.plan.wanted.iter().enumerate() {
            let i = self.plan.files[n as usize];
            let entry = &self.plan.entries[i];
            if entry.size >= RESUME_MIN_BYTES {
                let base = store.file_at(k).map_or(0, |(_, _, base)| base);
                let temp = self.temps[k].clone();
                files.push(Tracked {
                    base,
                    entry: entry.clone(),
                    target: self.plan.targets[i].clone(),
                    temp,
                    recorded: 0,
                });
            }
        }
        ResumeKeeper { files, last: None, fs: self.plan.fs.clone() }
    }

    /// The manifest it receives.
    pub fn entries(&self) -> &[Entry] {
        &self.plan.entries
    }

    /// The temporary files, one per wanted file, in the order the data moves.
    pub fn temps(&self) -> &[PathBuf] {
        &self.temps
    }

    /// Gives up its claims but leaves its temporary files where they are, as its process
    /// ending would (for a server that stops inside a process that goes on: the next run of
    /// the server finds them as a restart would).
    pub fn keep_files(mut self) {
        self.committed = self.temps.len();
    }

    /// The temporary files as one store, in the order the data moves.
    pub fn store(&self) -> FileSet {
        let sizes =
            self.plan.wanted.iter().map(|&n| self.plan.entries[self.plan.files[n as usize]].size);
        FileSet::new(self.temps.iter().cloned().zip(sizes).collect(), true)
            .confined(self.plan.fs.clone())
    }

    /// Renames every file whose received bytes (`actual`) hash to the sender's `expected`
    /// into place (mode and, with `preserve`, time applied first), makes the links, applies
    /// the directories' modes and times, and syncs the file system once. A mismatched file
    /// is removed and listed; the others are stored.
    pub fn commit(
        mut self,
        expected: &[blake3::Hash],
        actual: &[blake3::Hash],
    ) -> Result<Committed, PlanError> {
        let mut done = Committed::default();
        let count = self.temps.len();
        if expected.len() != count || actual.len() != count {
            return Err(PlanError::Refused(format!(
                "{} digests for {count} files",
                expected.len().min(actual.len())
            )));
        }
        let preserve = self.plan.preserve;
        for k in 0..count {
            let entry = &self.plan.entries[self.plan.files[self.plan.wanted[k] as usize]];
            let target = &self.plan.targets[self.plan.files[self.plan.wanted[k] as usize]];
            let temp = &self.temps[k];
            resume::forget(&self.plan.fs, target);
            // `blake3::Hash` compares in constant time.
            if expected[k] != actual[k] {
                let _ = self.plan.fs.remove_file(temp);
                done.mismatched.push(entry.path.clone());
                self.committed = k + 1;
                continue;
            }
            let io_err = |e| PlanError::Io(target.display().to_string(), e);
            let file = self.plan.fs.open(temp, true).map_err(io_err)?;
            file.set_permissions(std::fs::Permissions::from_mode(file_mode(entry.mode, preserve)))
                .map_err(io_err)?;
            if preserve {
                file.set_modified(system_time(entry.mtime)).map_err(io_err)?;
            }
            drop(file);
            self.plan.fs.rename(temp, target).map_err(io_err)?;
            self.committed = k + 1;
            done.files += 1;
        }
        for &i in &self.plan.links {
            let (entry, target) = (&self.plan.entries[i], &self.plan.targets[i]);
            let io_err = |e| PlanError::Io(target.display().to_string(), e);
            if self.plan.fs.symlink_metadata(target).is_ok() {
                self.plan.fs.remove_file(target).map_err(io_err)?;
            }
            self.plan.fs.symlink(entry.target.as_deref().unwrap_or(""), target).map_err(io_err)?;
            done.links += 1;
        }
        // Every file is in place: its claim goes now, before the directories' times are set
        // (removing a claim's lock file beside it changes its directory's time: released at
        // the drop, they undid --preserve's directory times).
        drop(std::mem::replace(&mut self.claims, Claims::new(self.plan.fs.clone())));
        // Deepest first: setting a directory's time after its contents changed.
        for &i in self.plan.dirs.iter().rev().filter(|_| preserve) {
            let (entry, target) = (&self.plan.entries[i], &self.plan.targets[i]);
            let io_err = |e| PlanError::Io(target.display().to_string(), e);
            let mode = std::fs::Permissions::from_mode(entry.mode & 0o777);
            let dir = self.plan.fs.open(target, false).map_err(io_err)?;
            dir.set_permissions(mode).map_err(io_err)?;
            dir.set_modified(system_time(entry.mtime)).map_err(io_err)?;
        }
        if let Some(&i) = self.plan.files.first().or(self.plan.dirs.first()) {
            let dir = parent_dir(&self.plan.targets[i]);
            let synced = (self.plan.fs.open(dir, false))
                .and_then(|d| rustix::fs::syncfs(&d).map_err(io::Error::from));
            synced.map_err(|e| PlanError::Io(dir.display().to_string(), e))?;
        }
        Ok(done)
    }
}

impl Drop for Incoming {
    /// Removes the temporary files not committed, except those a resume record names.
    fn drop(&mut self) {
        for (k, temp) in self.temps.iter().enumerate().skip(self.committed) {
            let target = &self.plan.targets[self.plan.files[self.plan.wanted[k] as usize]];
            if self.plan.fs.symlink_metadata(&resume::record_path(target)).is_err() {
                let _ = self.plan.fs.remove_file(temp);
            }
        }
    }
}

/// A large wanted file whose progress is recorded for a resume.
#[derive(Debug)]
struct Tracked {
    base: u64,
    entry: Entry,
    target: PathBuf,
    temp: PathBuf,
    /// The prefix last recorded.
    recorded: u64,
}

/// Writes the resume records of an incoming transfer's large files as their bytes reach the
/// disk ([`Incoming::keeper`]).
#[derive(Debug)]
pub struct ResumeKeeper {
    files: Vec<Tracked>,
    last: Option<std::time::Instant>,
    /// The steps on disk (beneath the root when confined).
    fs: Confined,
}

impl ResumeKeeper {
    /// The offset space is on disk without a gap up to `prefix`: records the files it covers
    /// further than last time (at most every [`RECORD_EVERY`], unless `now` is set). A record
    /// that cannot be written only costs the resume. A file whose every byte is there is not
    /// recorded: its commit comes next, and may come before this end's last progress report
    /// (the answer goes out while the channels linger), which must not leave a record behind.
    pub fn update(&mut self, prefix: u64, now: bool) {
        if !now && self.last.is_some_and(|t| t.elapsed() < RECORD_EVERY) {
            return;
        }
        self.last = Some(std::time::Instant::now());
        for file in &mut self.files {
            let have = prefix.saturating_sub(file.base).min(file.entry.size);
            if have > file.recorded
                && have < file.entry.size
                && resume::save(&self.fs, &file.target, &file.temp, &file.entry, have).is_ok()
            {
                file.recorded = have;
            }
        }
    }
}

/// A file's permission bits at the destination.
pub(crate) fn file_mode(source_mode: u32, preserve: bool) -> u32 {
    match (preserve, source_mode & 0o111 != 0) {
        (true, _) => source_mode & 0o777,
        (false, true) => 0o755,
        (false, false) => 0o644,
    }
}

pub(crate) fn system_time(secs: i64) -> SystemTime {
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
}
