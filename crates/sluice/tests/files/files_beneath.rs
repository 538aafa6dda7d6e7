//! Opening beneath a root (`openat2(RESOLVE_BENEATH)`): what a server reads or writes is opened
//! again relative to its root, so a path checked earlier that has since been made to lead out
//! (a directory swapped for a symbolic link) is refused, while links that stay inside work.

use std::fs;
use std::os::unix::fs::symlink;

use sluice::datapath::Store;
use sluice::files::Beneath;
use sluice::tree::FileSet;

struct Layout {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    root: std::path::PathBuf,
}

/// `root/dir/f.txt` ("inside"), `outside/secret.txt` ("secret"), and links in the root: `rel`
/// -> `dir` (relative), `abs` -> `root/dir` (absolute, inside), `swapped` -> `outside`.
fn layout() -> Layout {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let root = a.path().canonicalize().unwrap();
    let outside = b.path().canonicalize().unwrap();
    fs::create_dir(root.join("dir")).unwrap();
    fs::write(root.join("dir/f.txt"), b"inside").unwrap();
    fs::write(outside.join("secret.txt"), b"secret").unwrap();
    symlink("dir", root.join("rel")).unwrap();
    symlink(root.join("dir"), root.join("abs")).unwrap();
    symlink(&outside, root.join("swapped")).unwrap();
    Layout { _dirs: (a, b), root }
}

fn read(beneath: &Beneath, path: &std::path::Path) -> std::io::Result<String> {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut beneath.open(path, false)?, &mut text)?;
    Ok(text)
}

#[test]
fn paths_that_stay_inside_open_and_paths_that_lead_out_are_refused() {
    let l = layout();
    let beneath = Beneath::new(&l.root).unwrap();
    for inside in ["dir/f.txt", "rel/f.txt", "abs/f.txt"] {
        assert_eq!(read(&beneath, &l.root.join(inside)).unwrap(), "inside", "{inside}");
    }
    // Both temporary directories are in the same place: `..` from the root reaches the other.
    let sibling = fs::read_link(l.root.join("swapped")).unwrap();
    let climb = format!("dir/../../{}/secret.txt", sibling.file_name().unwrap().to_str().unwrap());
    for out in ["swapped/secret.txt", climb.as_str()] {
        assert!(l.root.join(out).exists(), "{out} exists, reached by path");
        let err = read(&beneath, &l.root.join(out)).expect_err(out);
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{out}: {err}");
        assert!(err.to_string().contains("leads outside the served directory"), "{err}");
    }
    // A path that was never under the root is refused without a look.
    let err = read(&beneath, std::path::Path::new("/etc/hostname")).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
}

#[test]
fn a_file_set_beneath_the_root_refuses_a_path_swapped_after_its_check() {
    let l = layout();
    // The server checked `dir/f.txt` and will read it; someone then swaps `dir` for a link out.
    let checked = l.root.join("dir/f.txt");
    let set = FileSet::new(vec![(checked.clone(), 6)], false)
        .confined(sluice::files::Confined::new(Some(&l.root)).unwrap());
    fs::rename(l.root.join("dir"), l.root.join("dir.old")).unwrap();
    let outside = fs::read_link(l.root.join("swapped")).unwrap();
    fs::write(outside.join("f.txt"), b"SECRET").unwrap();
    symlink(&outside, l.root.join("dir")).unwrap();
    let mut buf = [0u8; 6];
    let err = set.read_at(&mut buf, 0).expect_err("the swapped path is refused");
    assert!(err.to_string().contains("leads outside the served directory"), "{err}");
    // Without the handle, the same read would have returned the outside file.
    let plain = FileSet::new(vec![(checked, 6)], false);
    assert_eq!(plain.read_at(&mut buf, 0).unwrap(), 6);
    assert_eq!(&buf, b"SECRET");
}

#[test]
fn receiving_steps_beneath_the_root_work_inside_and_never_land_outside() {
    use sluice::files::Confined;
    let l = layout();
    let fs = Confined::new(Some(&l.root)).unwrap();
    // Inside, through a relative link and an absolute one that stays inside: every step works.
    for dir in ["dir", "rel", "abs"] {
        let base = l.root.join(dir);
        let made = base.join(format!("made-{dir}"));
        fs.create_dir(&made).unwrap();
        let temp = made.join(".t.sluice-part-0");
        std::io::Write::write_all(&mut fs.create_new(&temp, 0o600).unwrap(), b"data").unwrap();
        fs.rename(&temp, &made.join("t")).unwrap();
        fs.symlink("t", &made.join("link")).unwrap();
        assert_eq!(fs::read(l.root.join("dir").join(format!("made-{dir}/link"))).unwrap(), b"data");
        fs.remove_file(&made.join("link")).unwrap();
    }
    // An existing file is never replaced by create_new, nor followed through a final link.
    assert!(fs.create_new(&l.root.join("dir/f.txt"), 0o600).is_err());
    assert!(fs.create_new(&l.root.join("swapped"), 0o600).is_err());
    // Through the directory swapped for a link out, every step is refused and nothing lands
    // outside.
    let outside = fs::read_link(l.root.join("swapped")).unwrap();
    let before = fs::read_dir(&outside).unwrap().count();
    let via = l.root.join("swapped");
    let refused = [
        fs.create_dir(&via.join("d")).err(),
        fs.create_new(&via.join("f"), 0o600).err(),
        fs.symlink("x", &via.join("l")).err(),
        fs.rename(&l.root.join("dir/f.txt"), &via.join("moved")).err(),
        fs.remove_file(&via.join("secret.txt")).err(),
    ];
    for (step, err) in refused.iter().enumerate() {
        let err = err.as_ref().unwrap_or_else(|| panic!("step {step} went through the link"));
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "step {step}: {err}");
    }
    assert_eq!(fs::read_dir(&outside).unwrap().count(), before, "something landed outside");
    assert!(outside.join("secret.txt").exists());
    assert!(l.root.join("dir/f.txt").exists());
}

#[test]
fn walking_and_listing_beneath_the_root_refuse_a_directory_swapped_for_a_link_out() {
    use sluice::files::Confined;
    use sluice::tree::{Links, WalkOptions, list, walk};
    let l = layout();
    let checked = l.root.join("dir");
    let confined =
        WalkOptions { recursive: true, links: Links::Copy, confine: Some(l.root.clone()) };
    // Before the swap, the walk and the listing see the tree (its links as links).
    let before = walk(std::slice::from_ref(&checked), &confined).unwrap();
    assert_eq!(
        before.entries.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
        ["dir", "dir/f.txt"]
    );
    let fs = Confined::new(Some(&l.root)).unwrap();
    assert_eq!(list(&fs, &l.root).unwrap().entries.len(), 4);
    // `dir` becomes a link out after its check.
    fs::rename(&checked, l.root.join("dir.old")).unwrap();
    symlink(fs::read_link(l.root.join("swapped")).unwrap(), &checked).unwrap();
    let err =
        walk(std::slice::from_ref(&checked), &confined).expect_err("the walk must not go out");
    assert!(err.to_string().contains("leads outside the served directory"), "{err}");
    // Listing it shows the link itself, never what is behind it.
    let listed = list(&fs, &checked).unwrap().entries;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (listed[0].kind, listed[0].path.as_str()),
        (sluice::tree::EntryKind::Symlink, "dir")
    );
    assert!(fs.metadata(&checked.join("secret.txt")).is_err());
    // Without a root to stay beneath (a client's own files), the same walk follows the link.
    let unconfined = WalkOptions { confine: None, ..confined };
    let outside = walk(&[checked], &unconfined).unwrap();
    assert!(outside.entries.iter().any(|e| e.path == "dir/secret.txt"));
}
