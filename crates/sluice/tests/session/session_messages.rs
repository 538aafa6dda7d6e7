//! Control-message framing and encoding.

use std::time::Duration;

use sluice::session::messages::{
    Answer, CodecError, ErrorCode, FrameError, MAX_MESSAGE_BYTES, ReceiverMsg, Request, SenderMsg,
    encode, read_message, write_message,
};
use sluice::session::messages::{BlockHashes, ManifestPart, Want};
use sluice::session::{FileKind, Links, Overwrite, StatInfo};
use sluice::tree::{Entry, EntryKind};
use tokio::io::AsyncWriteExt;

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn messages_round_trip_through_a_stream() {
    let (mut a, mut b) = tokio::io::duplex(4096);
    let requests = vec![
        Request::Get {
            paths: vec!["dir/file".into(), "a b\n-c".into()],
            recursive: true,
            links: Links::Follow,
            checksum: true,
            compress: Some(7),
            udp_ports: vec![5000, 5001],
        },
        Request::Put {
            dest: "x".into(),
            overwrite: Overwrite::IfNewer,
            checksum: false,
            preserve: true,
            dry_run: true,
            early: true,
        },
    ];
    let sent = vec![
        SenderMsg::Manifest(ManifestPart {
            entries: vec![Entry {
                path: "t/big".into(),
                kind: EntryKind::File,
                size: 1 << 40,
                mtime: -3,
                mode: 0o755,
                target: None,
                blake3: None,
            }],
            last: false,
        }),
        SenderMsg::Resumed { kept: vec![[1, 4 << 20]] },
        SenderMsg::Digests { blake3: vec!["ab".repeat(32), "cd".repeat(32)] },
        SenderMsg::Failed { code: ErrorCode::Integrity, message: "bad".into() },
    ];
    let answered = vec![
        ReceiverMsg::Want(Want {
            files: vec![[0, 3], [7, 9]],
            replaced: 1,
            kept: 2,
            resume: vec![BlockHashes { file: 1, blocks: vec!["ef".repeat(32)] }],
            dry_run: true,
            early: false,
        }),
        ReceiverMsg::Want(Want {
            files: vec![[0, 1]],
            replaced: 0,
            kept: 0,
            resume: vec![],
            dry_run: false,
            early: true,
        }),
        ReceiverMsg::Ready { udp_ports: vec![7, 8] },
        ReceiverMsg::Verified,
    ];
    for msg in &requests {
        write_message(&mut a, msg).await.unwrap();
    }
    for msg in &requests {
        assert_eq!(&read_message::<_, Request>(&mut b, SECOND).await.unwrap(), msg);
    }
    for msg in &sent {
        write_message(&mut a, msg).await.unwrap();
    }
    for msg in &sent {
        assert_eq!(&read_message::<_, SenderMsg>(&mut b, SECOND).await.unwrap(), msg);
    }
    for msg in &answered {
        write_message(&mut a, msg).await.unwrap();
    }
    for msg in &answered {
        assert_eq!(&read_message::<_, ReceiverMsg>(&mut b, SECOND).await.unwrap(), msg);
    }
    let info = Answer::StatInfo(StatInfo { size: 3, mtime: -5, kind: FileKind::Directory });
    write_message(&mut a, &info).await.unwrap();
    assert_eq!(read_message::<_, Answer>(&mut b, SECOND).await.unwrap(), info);
}

#[test]
fn wire_form_is_a_big_endian_length_and_tagged_json() {
    let frame = encode(&Request::Stat { path: "a".into() }).unwrap();
    let body = br#"{"type":"stat","path":"a"}"#;
    assert_eq!(&frame[..4], &(body.len() as u32).to_be_bytes());
    assert_eq!(&frame[4..], body);
    let error = encode(&Answer::Failed { code: ErrorCode::NotFound, message: "m".into() }).unwrap();
    assert_eq!(&error[4..], br#"{"type":"failed","code":"not-found","message":"m"}"#);
    let digest = encode(&SenderMsg::Digests { blake3: vec!["0f".repeat(32)] }).unwrap();
    let body = format!(r#"{{"type":"digests","blake3":["{}"]}}"#, "0f".repeat(32));
    assert_eq!(&digest[4..], body.as_bytes());
    // A manifest part: the entry's fields beside the tag; absent options are left out.
    let entry = Entry {
        path: "d/f".into(),
        kind: EntryKind::Symlink,
        size: 0,
        mtime: 1,
        mode: 0o777,
        target: Some("../x".into()),
        blake3: None,
    };
    let part = encode(&SenderMsg::Manifest(ManifestPart { entries: vec![entry], last: true }));
    let body = r#"{"type":"manifest","entries":[{"path":"d/f","kind":"symlink","size":0,"mtime":1,"mode":511,"target":"../x"}],"last":true}"#;
    assert_eq!(&part.unwrap()[4..], body.as_bytes());
}

#[tokio::test]
async fn an_oversized_length_is_refused_before_reading_the_body() {
    let (mut a, mut b) = tokio::io::duplex(64);
    a.write_all(&((MAX_MESSAGE_BYTES + 1) as u32).to_be_bytes()).await.unwrap();
    match read_message::<_, Request>(&mut b, SECOND).await {
        Err(FrameError::Codec(CodecError::TooLarge(n))) => assert_eq!(n, MAX_MESSAGE_BYTES + 1),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(matches!(
        encode(&Request::Stat { path: "x".repeat(MAX_MESSAGE_BYTES) }),
        Err(CodecError::TooLarge(_))
    ));
}

#[tokio::test]
async fn reads_time_out_end_and_reject_garbage() {
    let (mut a, mut b) = tokio::io::duplex(64);
    // Half a frame, then silence.
    a.write_all(&[0, 0, 0, 10, b'{']).await.unwrap();
    let short = Duration::from_millis(50);
    assert!(matches!(read_message::<_, Request>(&mut b, short).await, Err(FrameError::Timeout(_))));

    let (mut a, mut b) = tokio::io::duplex(64);
    a.write_all(&[0, 0, 0, 10]).await.unwrap();
    drop(a);
    assert!(matches!(read_message::<_, Request>(&mut b, SECOND).await, Err(FrameError::Eof)));

    let (mut a, mut b) = tokio::io::duplex(64);
    a.write_all(&[0, 0, 0, 4]).await.unwrap();
    a.write_all(b"nope").await.unwrap();
    assert!(matches!(
        read_message::<_, Request>(&mut b, SECOND).await,
        Err(FrameError::Codec(CodecError::Json(_)))
    ));

    let (mut a, mut b) = tokio::io::duplex(64);
    let unknown = br#"{"type":"format_disk"}"#;
    a.write_all(&(unknown.len() as u32).to_be_bytes()).await.unwrap();
    a.write_all(unknown).await.unwrap();
    assert!(matches!(
        read_message::<_, Request>(&mut b, SECOND).await,
        Err(FrameError::Codec(CodecError::Json(_)))
    ));
}
