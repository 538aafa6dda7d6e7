//! The page, its style and its scripts, built into the binary (nothing is fetched at run time,
//! and the build needs no npm): `crates/sluice-cli/web/`, served at `/`, `/app.css`, `/js/...`;
//! and the page's WebAssembly at `/sluice.wasm` (`crates/sluice-wasm`: BLAKE3 and the transfer
//! machines, built by `build.rs`).
//!
//! Each answer has a validator (`ETag`, from the asset's BLAKE3), so a page loaded again asks
//! whether it changed and gets `304 Not Modified` without the bytes (`Cache-Control: no-cache`
//! keeps it asking: a new build's page never runs an old script). An asset that zstd shrinks
//! goes compressed (`Content-Encoding: zstd`) to a browser that accepts it: the module with its
//! machines is 444 KB and 129 KB so. Both are made once per process, at the first request.

use std::sync::OnceLock;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::request::AppState;

/// Path, media type, contents.
const ASSETS: &[(&str, &str, &[u8])] = &[
    ("/", "text/html; charset=utf-8", include_bytes!("../../web/index.html")),
    ("/app.css", "text/css; charset=utf-8", include_bytes!("../../web/app.css")),
    ("/js/main.js", JS, include_bytes!("../../web/js/main.js")),
    ("/js/api.js", JS, include_bytes!("../../web/js/api.js")),
    ("/js/dom.js", JS, include_bytes!("../../web/js/dom.js")),
    ("/js/pane.js", JS, include_bytes!("../../web/js/pane.js")),
    ("/js/local.js", JS, include_bytes!("../../web/js/local.js")),
    ("/js/transfers.js", JS, include_bytes!("../../web/js/transfers.js")),
    ("/js/chart.js", JS, include_bytes!("../../web/js/chart.js")),
    ("/js/hash.js", JS, include_bytes!("../../web/js/hash.js")),
    ("/js/sweep.js", JS, include_bytes!("../../web/js/sweep.js")),
    ("/js/jobs.js", JS, include_bytes!("../../web/js/jobs.js")),
    ("/js/choose.js", JS, include_bytes!("../../web/js/choose.js")),
    ("/js/wt.js", JS, include_bytes!("../../web/js/wt.js")),
    ("/js/fetch.js", JS, include_bytes!("../../web/js/fetch.js")),
    ("/js/machines.js", JS, include_bytes!("../../web/js/machines.js")),
    ("/js/store.js", JS, include_bytes!("../../web/js/store.js")),
    ("/js/batches.js", JS, include_bytes!("../../web/js/batches.js")),
    ("/sluice.wasm", "application/wasm", include_bytes!(concat!(env!("OUT_DIR"), "/sluice.wasm"))),
];

const JS: &str = "text/javascript; charset=utf-8";

/// zstd's level for the assets (made once; the module takes about 0.1 s).
const LEVEL: i32 = 19;

/// An asset's validator and, where zstd shrinks it, its compressed bytes.
struct Prepared {
    etag: HeaderValue,
    zstd: Option<Vec<u8>>,
}

/// Every asset's [`Prepared`], in the order of [`ASSETS`], made at the first request.
fn prepared() -> &'static [Prepared] {
    static PREPARED: OnceLock<Vec<Prepared>> = OnceLock::new();
    PREPARED.get_or_init(|| {
        ASSETS
            .iter()
            .map(|&(_, _, body)| {
                let hash = blake3::hash(body).to_hex();
                let etag = HeaderValue::from_str(&format!("\"{}\"", &hash[..32]))
                    .unwrap_or_else(|_| HeaderValue::from_static("\"\""));
                let zstd = zstd::bulk::compress(body, LEVEL).ok().filter(|z| z.len() < body.len());
                Prepared { etag, zstd }
            })
            .collect()
    })
}

/// Whether a request's `header` lists `token` or `*` (case aside), not with a weight of 0.
fn lists(headers: &HeaderMap, header: header::HeaderName, token: &str) -> bool {
    headers.get_all(header).iter().filter_map(|v| v.to_str().ok()).any(|v| {
        v.split(',').any(|item| {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| {
                let p = p.trim();
                p.strip_prefix("q=").and_then(|q| q.parse::<f32>().ok()) == Some(0.0)
            });
            (name.eq_ignore_ascii_case(token) || name == "*") && !refused
        })
    })
}

/// `router` with a route for each asset.
pub(crate) fn routes(mut router: Router<AppState>) -> Router<AppState> {
    for (index, &(path, media, body)) in ASSETS.iter().enumerate() {
        router = router.route(
            path,
            get(move |asked: HeaderMap| async move {
                let asset = &prepared()[index];
                let etag = asset.etag.clone();
                let mut headers = HeaderMap::new();
                headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
                headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
                headers.insert(header::ETAG, etag.clone());
                let tag = etag.to_str().unwrap_or("");
                if lists(&asked, header::IF_NONE_MATCH, tag) {
                    return (StatusCode::NOT_MODIFIED, headers).into_response();
                }
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
                match &asset.zstd {
                    Some(zstd) if lists(&asked, header::ACCEPT_ENCODING, "zstd") => {
                        let coding = HeaderValue::from_static("zstd");
                        headers.insert(header::CONTENT_ENCODING, coding);
                        (headers, zstd.as_slice()).into_response()
                    }
                    _ => (headers, body).into_response(),
                }
            }),
        );
    }
    router
}
