//! `sluice cp hostA:path hostB:path`: a third-party copy. This end holds a session to each
//! server, asks the source for a grant for the destination's certificate and hands the
//! destination the job; the data goes from the source to the destination directly.

use std::time::Instant;

use sluice::datapath::Progress;
use sluice::session::between::{DataSettings, Side, copy_between};
use sluice::session::{CopyObserver, CopyOptions, TransferReport};
use sluice_proto::config::ChannelConfig;

use crate::connect::{ConnectArgs, connect_asking};
use crate::exit;
use crate::show::{Mode, Show};

/// The two servers of a copy between them, and the data channels' settings the destination
/// proposes to the source.
pub(crate) struct Ends<'a> {
    pub(crate) connect: &'a ConnectArgs,
    pub(crate) source_host: &'a str,
    pub(crate) dest_host: &'a str,
    pub(crate) channel: ChannelConfig,
    pub(crate) channels: Option<u32>,
}

/// Runs the copy and shows it as a direct copy is shown; a failure names the server it came
/// from.
pub(crate) async fn copy(
    ends: Ends<'_>,
    sources: &[String],
    dest: &str,
    options: &CopyOptions,
    mode: Mode,
) -> anyhow::Result<()> {
    let file = crate::config::load()?;
    let config_of = |host: &str| {
        let prefs = file.prefs(host);
        ends.connect.client_config(host, &prefs, ends.channel.clone(), ends.channels)
    };
    let (source_config, dest_config) = (config_of(ends.source_host)?, config_of(ends.dest_host)?);
    let started = Instant::now();
    // Both at once, unless a person may be asked about an unknown fingerprint (then one
    // question after the other).
    let (source, destination) = if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        (connect_asking(source_config).await, connect_asking(dest_config).await)
    } else {
        tokio::join!(connect_asking(source_config), connect_asking(dest_config))
    };
    let source = source.map_err(|e| named(Side::Source, ends.source_host, e))?;
    let destination = destination.map_err(|e| named(Side::Destination, ends.dest_host, e))?;
    let show = Show::new(mode, "third-party");
    let mut observer = show.clone();
    let mut started_shown = false;
    let outcome = copy_between(
        &source,
        &destination,
        sources,
        dest,
        options,
        DataSettings { channel: &ends.channel, channels: ends.channels },
        |p| {
            if !started_shown && p.total > 0 {
                show.started(p.files, p.total);
                started_shown = true;
            }
            observer.progress(Progress { bytes: p.bytes, total: p.total, prefix: 0 });
        },
    )
    .await;
    tokio::join!(source.close(), destination.close());
    let done = outcome.map_err(|(side, e)| {
        let host = if side == Side::Source { ends.source_host } else { ends.dest_host };
        named(side, host, anyhow::Error::new(e))
    })?;
    // A job that was running already is timed by the destination, from its start.
    let secs = if done.attached {
        show.warning(&format!("job {} was running already: followed it to its end", done.job));
        done.millis as f64 / 1000.0
    } else {
        started.elapsed().as_secs_f64()
    };
    let report = TransferReport {
        files: done.files,
        bytes: done.bytes,
        seconds: done.millis as f64 / 1000.0,
        blake3: done.blake3,
        replaced: done.replaced,
        kept: done.kept,
        resumed: done.resumed,
        planned: done.planned,
        ..TransferReport::default()
    };
    if options.dry_run && mode != Mode::Json {
        crate::show::print_planned(&report);
    }
    show.finished(&report, options.dry_run, secs);
    Ok(())
}

/// `err`, said as coming from `side`'s server `host`, with its exit code kept.
fn named(side: Side, host: &str, err: anyhow::Error) -> anyhow::Error {
    let code = exit::code_of(&err);
    let which = match side {
        Side::Source => "the source",
        Side::Destination => "the destination",
    };
    let message = format!("{which} {host}: {}", exit::describe(&err));
    anyhow::Error::new(exit::Coded { code, message })
}
