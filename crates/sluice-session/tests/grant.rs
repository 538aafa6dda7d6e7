//! A third-party transfer's grant (`sluice_session::grant`): it verifies for its job, its
//! reader and its paths (and what is inside a granted directory), and every misuse is refused
//! with its own error. Every time and key is fixed: the tests are the same on every run.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sluice_session::grant::{
    CLOCK_TOLERANCE_SECS, GRANT_VERSION, Grant, GrantAccess, GrantError, GrantRequest,
    MAX_GRANT_BYTES, MAX_LIFETIME_SECS, issue, token_tag, verify,
};

const KEY: [u8; 32] = [0x42; 32];
const OTHER_KEY: [u8; 32] = [0x43; 32];
const TOKEN_DIGEST: [u8; 32] = [0x11; 32];
const JOB: &str = "8f14e45fceea167a5a36dedd4bea2543";
const OTHER_JOB: &str = "c9f0f895fb98ab9159f51fd0297e236d";
/// B's fingerprint, as C pinned it.
const READER: &str = "SHA256:uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek";
const OTHER_READER: &str = "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU";
const ISSUED_AT: u64 = 1_795_000_000;
const LIFETIME: u64 = 6 * 60 * 60;
const EXPIRES_AT: u64 = ISSUED_AT + LIFETIME;
/// A moment inside the grant's life.
const NOW: u64 = ISSUED_AT + 60;

fn granted_paths() -> Vec<String> {
    vec!["instrument/run7".to_owned(), "calibration.json".to_owned()]
}

fn request(paths: &[String]) -> GrantRequest<'_> {
    GrantRequest {
        job: JOB,
        reader: READER,
        paths,
        token: 3,
        token_digest: &TOKEN_DIGEST,
        now_secs: ISSUED_AT,
        lifetime_secs: LIFETIME,
    }
}

/// The grant A gives C for B.
fn grant() -> String {
    issue(&KEY, &request(&granted_paths())).unwrap()
}

/// B presents the grant for `paths` of its job at `NOW`.
fn read(wire: &str, paths: &[&str]) -> Result<Grant, GrantError> {
    verify(wire, &KEY, NOW, READER, JOB, paths)
}

#[test]
fn a_grant_verifies_for_its_job_reader_and_paths_and_inside_a_granted_directory() {
    let wire = grant();
    assert!(wire.starts_with("sluice-grant-v1."), "{wire}");
    assert!(wire.len() < 1024, "{} bytes", wire.len());
    assert!(wire.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)), "{wire}");

    let grant = read(&wire, &["instrument/run7", "calibration.json"]).unwrap();
    assert_eq!(grant.job, JOB);
    assert_eq!(grant.reader, READER);
    assert_eq!(grant.paths, granted_paths());
    assert_eq!(grant.access, GrantAccess::Read);
    assert_eq!(grant.token, 3);
    assert_eq!((grant.issued_at, grant.expires_at), (ISSUED_AT, EXPIRES_AT));
    assert_eq!(grant.check_token(&KEY, Some(&TOKEN_DIGEST)), Ok(()));

    // A file, and a directory, inside a granted directory; one path alone.
    assert!(read(&wire, &["instrument/run7/frames/000001.h5"]).is_ok());
    assert!(read(&wire, &["instrument/run7/frames"]).is_ok());
    assert!(read(&wire, &["calibration.json"]).is_ok());
    // Within its life B may present it again (to resume the same job).
    assert_eq!(verify(&wire, &KEY, EXPIRES_AT - 1, READER, JOB, &["calibration.json"]), Ok(grant));
}

#[test]
fn a_grant_reused_for_another_job_is_refused() {
    let refused = verify(&grant(), &KEY, NOW, READER, OTHER_JOB, &["calibration.json"]);
    assert_eq!(
        refused,
        Err(GrantError::OtherJob { granted: JOB.to_owned(), asked: OTHER_JOB.to_owned() })
    );
    assert!(refused.unwrap_err().to_string().contains("new grant"));
}

#[test]
fn a_path_the_grant_does_not_name_is_refused() {
    let wire = grant();
    // Another file; a sibling whose name starts like a granted directory's; the directory
    // above a granted one; a path that is covered beside one that is not.
    for (paths, outside) in [
        (&["secret.key"][..], "secret.key"),
        (&["instrument/run70"], "instrument/run70"),
        (&["instrument/run7.tar"], "instrument/run7.tar"),
        (&["instrument"], "instrument"),
        (&["instrument/run7/a", "instrument/run8/a"], "instrument/run8/a"),
    ] {
        match read(&wire, paths) {
            Err(GrantError::NotCovered { path, granted }) => {
                assert_eq!(path, outside);
                assert_eq!(granted, "instrument/run7, calibration.json");
            }
            other => panic!("{paths:?}: {other:?}"),
        }
    }
    assert_eq!(read(&wire, &[] as &[&str]), Err(GrantError::NoPaths));
}

#[test]
fn escapes_absolute_and_unclean_paths_are_refused_before_any_comparison() {
    let wire = grant();
    for path in [
        "instrument/run7/../../etc/passwd",
        "../instrument/run7",
        "instrument/run7/..",
        "/instrument/run7",
        "/etc/passwd",
        "instrument//run7",
        "instrument/run7/",
        "./calibration.json",
        ".",
        "",
        "calibration.json\0",
    ] {
        match read(&wire, &[path]) {
            Err(GrantError::BadPath { path: refused, .. }) => assert_eq!(refused, path),
            other => panic!("{path:?}: {other:?}"),
        }
    }
}

#[test]
fn a_grant_presented_by_another_server_is_refused() {
    let refused = verify(&grant(), &KEY, NOW, OTHER_READER, JOB, &["calibration.json"]);
    assert_eq!(
        refused,
        Err(GrantError::OtherReader {
            granted: READER.to_owned(),
            presented: OTHER_READER.to_owned()
        })
    );
}

#[test]
fn an_expired_grant_is_refused_from_its_expiry_on() {
    let wire = grant();
    for now in [EXPIRES_AT, EXPIRES_AT + 1, EXPIRES_AT + 365 * 86_400, u64::MAX] {
        assert_eq!(
            verify(&wire, &KEY, now, READER, JOB, &["calibration.json"]),
            Err(GrantError::Expired { expires_at: EXPIRES_AT, now }),
            "at {now}"
        );
    }
}

#[test]
fn a_grant_before_its_issue_time_is_accepted_within_the_tolerance_only() {
    let wire = grant();
    let early = ISSUED_AT - CLOCK_TOLERANCE_SECS;
    assert!(verify(&wire, &KEY, early, READER, JOB, &["calibration.json"]).is_ok());
    for now in [early - 1, 0] {
        assert_eq!(
            verify(&wire, &KEY, now, READER, JOB, &["calibration.json"]),
            Err(GrantError::NotYetValid { issued_at: ISSUED_AT, now }),
            "at {now}"
        );
    }
}

#[test]
fn a_grant_altered_in_any_character_of_its_json_or_mac_is_refused_as_altered() {
    let wire = grant();
    let json_start = GRANT_VERSION.len() + 1;
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut tried = 0;
    for at in json_start..wire.len() {
        if wire.as_bytes()[at] == b'.' {
            continue;
        }
        for &c in alphabet.iter().filter(|&&c| c != wire.as_bytes()[at]) {
            let mut altered = wire.clone().into_bytes();
            altered[at] = c;
            let altered = String::from_utf8(altered).unwrap();
            assert_eq!(
                read(&altered, &["calibration.json"]),
                Err(GrantError::BadMac),
                "character {at} made {}",
                c as char
            );
            tried += 1;
        }
    }
    assert!(tried > 63 * 300, "{tried}");
    // The MAC cut short or made longer.
    assert_eq!(read(&wire[..wire.len() - 1], &["calibration.json"]), Err(GrantError::BadMac));
    assert_eq!(read(&format!("{wire}A"), &["calibration.json"]), Err(GrantError::BadMac));
}

#[test]
fn a_grant_sealed_with_another_key_is_refused_as_altered() {
    let other = issue(&OTHER_KEY, &request(&granted_paths())).unwrap();
    assert_eq!(read(&other, &["calibration.json"]), Err(GrantError::BadMac));
    // The same grant under our key verifies: only the key differed.
    assert!(read(&grant(), &["calibration.json"]).is_ok());
    assert!(verify(&other, &OTHER_KEY, NOW, READER, JOB, &["calibration.json"]).is_ok());
}

#[test]
fn text_that_is_not_a_grant_is_a_format_error() {
    let wire = grant();
    for text in [
        "",
        "sluice-grant-v1",
        "sluice-grant-v1.",
        "sluice-grant-v2.e30.AAAA",
        "Sluice-grant-v1.e30.AAAA",
        "sluice-grant-v1..AAAA",
        &wire.replacen('.', ":", 1),
        &format!("{wire}.AAAA"),
        &format!(" {wire}"),
    ] {
        assert!(
            matches!(read(text, &["calibration.json"]), Err(GrantError::Format(_))),
            "{text:?}"
        );
    }
    let long = "A".repeat(MAX_GRANT_BYTES + 1);
    assert!(matches!(read(&long, &["calibration.json"]), Err(GrantError::Format(_))));
}

#[test]
fn a_grant_whose_token_is_removed_or_replaced_is_void() {
    let grant = read(&grant(), &["calibration.json"]).unwrap();
    assert_eq!(grant.check_token(&KEY, None), Err(GrantError::TokenGone));
    assert_eq!(grant.check_token(&KEY, Some(&[0x12; 32])), Err(GrantError::TokenGone));
    // The tag is keyed: it tells nobody without the key which token issued the grant.
    assert_ne!(token_tag(&KEY, &TOKEN_DIGEST), token_tag(&OTHER_KEY, &TOKEN_DIGEST));
    assert_eq!(grant.token_tag, token_tag(&KEY, &TOKEN_DIGEST));
    assert!(!grant.token_tag.contains(&hex(&TOKEN_DIGEST)));
}

#[test]
fn issue_checks_its_inputs() {
    let paths = granted_paths();
    let base = request(&paths);
    let refused = |req: GrantRequest<'_>| issue(&KEY, &req).unwrap_err();

    assert_eq!(refused(GrantRequest { paths: &[], ..base }), GrantError::NoPaths);
    for bad in ["../etc", "/srv/data", "a//b", "a/", ".", ""] {
        let bad_paths = vec!["instrument/run7".to_owned(), bad.to_owned()];
        assert!(
            matches!(
                refused(GrantRequest { paths: &bad_paths, ..base }),
                GrantError::BadPath { .. }
            ),
            "{bad:?}"
        );
    }
    for secs in [0, MAX_LIFETIME_SECS + 1, u64::MAX] {
        assert_eq!(
            refused(GrantRequest { lifetime_secs: secs, ..base }),
            GrantError::Lifetime { secs }
        );
    }
    assert!(issue(&KEY, &GrantRequest { lifetime_secs: MAX_LIFETIME_SECS, ..base }).is_ok());
    assert_eq!(
        refused(GrantRequest { now_secs: u64::MAX - 10, lifetime_secs: 60, ..base }),
        GrantError::Lifetime { secs: 60 }
    );
    for job in ["", "job 1", "../job", &"a".repeat(65)] {
        assert_eq!(refused(GrantRequest { job, ..base }), GrantError::BadJobId(job.to_owned()));
    }
    for reader in ["", "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek", "SHA256:short"] {
        assert_eq!(
            refused(GrantRequest { reader, ..base }),
            GrantError::BadReader(reader.to_owned())
        );
    }
    let many: Vec<String> = (0..2000).map(|i| format!("instrument/run7/file{i:05}")).collect();
    assert!(matches!(refused(GrantRequest { paths: &many, ..base }), GrantError::TooLarge(_)));
}

#[test]
fn a_sealed_grant_with_too_long_a_life_is_refused() {
    // Only the key's holder can seal one: a grant from a server whose limit was higher.
    let mut grant = read(&grant(), &["calibration.json"]).unwrap();
    grant.expires_at = grant.issued_at + MAX_LIFETIME_SECS + 1;
    let signed =
        format!("{GRANT_VERSION}.{}", URL_SAFE_NO_PAD.encode(serde_json::to_vec(&grant).unwrap()));
    let mac = blake3::keyed_hash(&KEY, signed.as_bytes());
    let wire = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(mac.as_bytes()));
    assert_eq!(
        read(&wire, &["calibration.json"]),
        Err(GrantError::Lifetime { secs: MAX_LIFETIME_SECS + 1 })
    );
}

#[test]
fn each_refusal_has_its_own_message_and_none_shows_the_grant() {
    let wire = grant();
    let errors = [
        read("nonsense", &["calibration.json"]).unwrap_err(),
        issue(&OTHER_KEY, &request(&granted_paths()))
            .map(|other| read(&other, &["calibration.json"]).unwrap_err())
            .unwrap(),
        verify(&wire, &KEY, EXPIRES_AT, READER, JOB, &["calibration.json"]).unwrap_err(),
        verify(&wire, &KEY, 0, READER, JOB, &["calibration.json"]).unwrap_err(),
        verify(&wire, &KEY, NOW, OTHER_READER, JOB, &["calibration.json"]).unwrap_err(),
        verify(&wire, &KEY, NOW, READER, OTHER_JOB, &["calibration.json"]).unwrap_err(),
        read(&wire, &["../calibration.json"]).unwrap_err(),
        read(&wire, &["secret.key"]).unwrap_err(),
    ];
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    for (i, message) in messages.iter().enumerate() {
        assert!(!messages[..i].contains(message), "{message} twice");
        assert!(!message.contains(&wire[GRANT_VERSION.len() + 1..]), "{message}");
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
