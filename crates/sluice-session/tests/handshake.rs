//! The session handshake's two ends without I/O: the server's checks of `Hello` in their order,
//! and the client's reading of the `Welcome` and of the early-start `Offer`.

use std::time::{Duration, Instant};

use sluice_session::Fault;
use sluice_session::handshake::admit as decide;
use sluice_session::handshake::{
    AdmissionCounts, AdmissionLimits, AdmitDecision, HandshakeEffect, ServerHandshake,
    TokenVerdict, early_start, welcome,
};
use sluice_session::messages::{Answer, ErrorCode, GrantClaim, Offer, Request, Spec};

const ID: &str = "00112233445566778899aabbccddeeff";
const VERSION: u32 = 9;

fn spec(channels: u32) -> Spec {
    Spec {
        max_channels: channels,
        packet_size: 1452,
        cc: "adaptive".into(),
        cipher: "aes-256-gcm".into(),
        rate_bps: 0,
        min_rate_bps: 0,
        grow_streams: false,
    }
}

fn hello(version: u32, spec: Spec) -> Request {
    Request::Hello { version, token: "t0ken".into(), spec, grant: None }
}

fn effects(hs: &mut ServerHandshake) -> Vec<HandshakeEffect> {
    std::iter::from_fn(|| hs.poll_effect()).collect()
}

/// A handshake of `msg` whose token gets `verdict`: what it ended with.
fn admit(msg: Request, verdict: TokenVerdict) -> HandshakeEffect {
    let now = Instant::now();
    let mut hs = ServerHandshake::new(now, VERSION, ID.into(), 4, Duration::from_secs(10));
    hs.handle_message(now, msg);
    let mut first = effects(&mut hs);
    if let Some(HandshakeEffect::CheckToken(token)) = first.first() {
        assert_eq!(token, "t0ken");
        hs.handle_token(verdict);
        first = effects(&mut hs);
    }
    assert_eq!(first.len(), 1, "{first:?}");
    first.remove(0)
}

fn refused(effect: HandshakeEffect) -> (ErrorCode, String) {
    match effect {
        HandshakeEffect::Refuse { code, message } => (code, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_good_hello_is_welcomed_with_the_smaller_channel_count_and_the_tokens_rate_cap() {
    let effect = admit(hello(VERSION, spec(8)), TokenVerdict::Accepted { rate_cap: Some(5_000) });
    let HandshakeEffect::Open { welcome: answer, negotiated } = effect else {
        panic!("{effect:?}")
    };
    assert_eq!((negotiated.channels, negotiated.rate_bps), (4, 5_000));
    let Answer::Welcome { session_id, spec: chosen } = &answer else { panic!("{answer:?}") };
    assert_eq!((session_id.as_str(), chosen.max_channels), (ID, 4));
    // The client reads the same choice back.
    let (id, read) = welcome(answer, &spec(8)).unwrap();
    assert_eq!((id.as_str(), read), (ID, negotiated));
}

#[test]
fn a_hello_with_a_grant_asks_for_the_grant_check_and_its_verdict_decides() {
    let claim = GrantClaim { grant: "sluice-grant-v1.x.y".into(), job: "j1".into() };
    let msg = Request::Hello {
        version: VERSION,
        token: String::new(),
        spec: spec(2),
        grant: Some(claim.clone()),
    };
    for (verdict, opens) in [
        (TokenVerdict::Accepted { rate_cap: None }, true),
        (TokenVerdict::Refused("the grant has expired".into()), false),
    ] {
        let now = Instant::now();
        let mut hs = ServerHandshake::new(now, VERSION, ID.into(), 4, Duration::from_secs(10));
        hs.handle_message(now, msg.clone());
        // The grant is checked, never the empty token.
        assert_eq!(effects(&mut hs), vec![HandshakeEffect::CheckGrant(claim.clone())]);
        hs.handle_token(verdict);
        let effect = effects(&mut hs).remove(0);
        match (effect, opens) {
            (HandshakeEffect::Open { negotiated, .. }, true) => assert_eq!(negotiated.channels, 2),
            (HandshakeEffect::Refuse { code, message }, false) => {
                assert_eq!((code, message.as_str()), (ErrorCode::Auth, "the grant has expired"))
            }
            (other, _) => panic!("{other:?}"),
        }
    }
}

#[test]
fn the_token_is_checked_before_anything_else_is_said() {
    let refusal = TokenVerdict::Refused("the token was not accepted".into());
    // A wrong version and a bad spec: the refusal still names only the token.
    let (code, message) = refused(admit(hello(1, spec(0)), refusal));
    assert_eq!((code, message.as_str()), (ErrorCode::Auth, "the token was not accepted"));
}

#[test]
fn a_wrong_version_or_a_bad_spec_is_a_protocol_refusal() {
    let ok = || TokenVerdict::Accepted { rate_cap: None };
    let (code, message) = refused(admit(hello(VERSION - 1, spec(2)), ok()));
    assert_eq!(code, ErrorCode::Protocol);
    assert!(message.contains("version 8") && message.contains("(9)"), "{message}");
    let mut null = spec(2);
    null.cipher = "none".into();
    let (code, message) = refused(admit(hello(VERSION, null), ok()));
    assert_eq!(code, ErrorCode::Protocol);
    assert!(message.contains("cipher"), "{message}");
}

#[test]
fn anything_but_hello_first_is_refused_and_so_is_silence() {
    let stat = Request::Stat { path: "x".into() };
    let (code, _) = refused(admit(stat, TokenVerdict::Accepted { rate_cap: None }));
    assert_eq!(code, ErrorCode::Auth);

    let now = Instant::now();
    let mut hs = ServerHandshake::new(now, VERSION, ID.into(), 4, Duration::from_secs(10));
    assert_eq!(hs.poll_timeout(), Some(now + Duration::from_secs(10)));
    hs.handle_timeout(now + Duration::from_secs(9));
    assert!(effects(&mut hs).is_empty());
    hs.handle_timeout(now + Duration::from_secs(10));
    let (code, message) = refused(effects(&mut hs).remove(0));
    assert_eq!((code, message.as_str()), (ErrorCode::Auth, "no Hello within the deadline"));

    let mut hs = ServerHandshake::new(now, VERSION, ID.into(), 4, Duration::from_secs(10));
    hs.handle_bad_message("malformed message".into());
    let (code, message) = refused(effects(&mut hs).remove(0));
    assert_eq!(code, ErrorCode::Protocol);
    assert!(message.starts_with("bad handshake"), "{message}");
}

#[test]
fn a_client_refuses_a_welcome_it_did_not_ask_for() {
    let chosen =
        |channels, id: &str| Answer::Welcome { session_id: id.into(), spec: spec(channels) };
    assert!(matches!(welcome(chosen(8, ID), &spec(4)), Err(Fault::Protocol(_))), "more channels");
    assert!(matches!(welcome(chosen(2, "xyz"), &spec(4)), Err(Fault::Protocol(_))), "bad id");
    let refused = Answer::Refused { code: ErrorCode::Auth, message: "no".into() };
    assert_eq!(
        welcome(refused, &spec(4)),
        Err(Fault::Peer { code: ErrorCode::Auth, message: "no".into() })
    );
    let stat = Answer::StatInfo(sluice_session::messages::StatInfo {
        size: 0,
        mtime: 0,
        kind: sluice_session::messages::FileKind::File,
    });
    assert!(matches!(welcome(stat, &spec(4)), Err(Fault::Protocol(_))));
}

#[test]
fn an_offer_gives_the_ports_of_the_channels_the_welcome_will_choose() {
    let offer =
        |ports: Vec<u16>| Offer { session_id: ID.into(), max_channels: 3, udp_ports: ports };
    assert_eq!(early_start(&offer(vec![]), &spec(8)), Ok(None), "no sockets offered");
    let (id, negotiated, ports) = early_start(&offer(vec![7, 8, 9]), &spec(8)).unwrap().unwrap();
    assert_eq!((id.as_str(), negotiated.channels, ports), (ID, 3, vec![7, 8, 9]));
    let (_, negotiated, ports) = early_start(&offer(vec![7, 8, 9]), &spec(2)).unwrap().unwrap();
    assert_eq!((negotiated.channels, ports), (2, vec![7, 8]));
    assert!(early_start(&offer(vec![7]), &spec(8)).is_err(), "fewer ports than channels");
    let bad_id = Offer { session_id: "nope".into(), ..offer(vec![7, 8, 9]) };
    assert!(early_start(&bad_id, &spec(8)).is_err());
}

const LIMITS: AdmissionLimits = AdmissionLimits {
    per_address: 8,
    all: 64,
    retry_above: 16,
    waiting_per_address: 64,
    waiting_all: 128,
    place_wait: Duration::from_secs(2),
};

#[test]
fn admission_places_then_retries_then_waits_then_refuses() {
    let counts =
        |held_all, held_here| AdmissionCounts { held_all, held_here, ..Default::default() };
    assert_eq!(decide(&LIMITS, &counts(0, 0), false), AdmitDecision::Place);
    // Past 16 in all, or with its address's places taken, a newcomer proves its address first.
    assert_eq!(decide(&LIMITS, &counts(16, 0), false), AdmitDecision::Retry);
    assert_eq!(decide(&LIMITS, &counts(8, 8), false), AdmitDecision::Retry);
    assert_eq!(decide(&LIMITS, &counts(16, 0), true), AdmitDecision::Place);
    // Its address full: it waits its turn while the places turn over.
    assert_eq!(decide(&LIMITS, &counts(8, 8), true), AdmitDecision::Wait);
    let stalled = AdmissionCounts { since_turnover: Duration::from_secs(2), ..counts(8, 8) };
    assert!(
        matches!(decide(&LIMITS, &stalled, true), AdmitDecision::Refuse(why) if why.contains("stalled"))
    );
    let crowded = AdmissionCounts { waiting_here: 64, ..counts(8, 8) };
    assert!(matches!(decide(&LIMITS, &crowded, true), AdmitDecision::Refuse(_)));
    let crowded = AdmissionCounts { waiting_all: 128, ..counts(8, 8) };
    assert!(matches!(decide(&LIMITS, &crowded, true), AdmitDecision::Refuse(_)));
    // The server full, its address not: refused, not kept waiting for another address's place.
    assert!(matches!(decide(&LIMITS, &counts(64, 2), true), AdmitDecision::Refuse(_)));
}

#[test]
fn a_transfers_channels_share_what_their_receiver_keeps_for_the_tails_code() {
    use sluice_proto::config::ChannelConfig;
    use sluice_session::negotiate::{Negotiated, TAIL_CODE_BYTES};
    let base = ChannelConfig::default();
    // 64 MiB a transfer, at most the base's 32 MiB a channel.
    for (channels, share) in [(1, 32 << 20), (2, 32 << 20), (4, 16 << 20), (64, 1 << 20)] {
        let negotiated = Negotiated::from_spec(&spec(channels)).unwrap();
        let config = negotiated.apply(&base);
        assert_eq!(config.tail_code_bytes, share, "{channels} channels");
        assert!(u64::from(channels) * config.tail_code_bytes <= TAIL_CODE_BYTES);
    }
    // Both ends apply the same negotiated spec, so they agree.
    let negotiated = Negotiated::from_spec(&spec(2)).unwrap();
    assert_eq!(negotiated.apply(&base).tail_code_bytes, 32 << 20);
}
