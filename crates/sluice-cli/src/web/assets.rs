//! The page, its style and its scripts, built into the binary (nothing is fetched at run time,
//! and the build needs no npm): `crates/sluice-cli/web/`, served at `/`, `/app.css`, `/js/...`;
//! and the page's BLAKE3 as WebAssembly at `/sluice.wasm` (`crates/sluice-wasm`, built by
//! `build.rs`).

use axum::Router;
use axum::http::{HeaderValue, header};
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
    ("/sluice.wasm", "application/wasm", include_bytes!(concat!(env!("OUT_DIR"), "/sluice.wasm"))),
];

const JS: &str = "text/javascript; charset=utf-8";

/// `router` with a route for each asset.
pub(crate) fn routes(mut router: Router<AppState>) -> Router<AppState> {
    for &(path, media, body) in ASSETS {
        router = router.route(
            path,
            get(move || async move {
                let headers = [
                    (header::CONTENT_TYPE, HeaderValue::from_static(media)),
                    (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
                ];
                (headers, body).into_response()
            }),
        );
    }
    router
}
