//! A third-party copy, seen from the client (`docs/third-party.md`): with a session to the
//! source server and one to the destination server, ask the source for a grant for the
//! destination's certificate, and hand the destination the job. The data goes from the source
//! to the destination directly; this end carries control messages and progress only.

use sluice_proto::config::ChannelConfig;
use sluice_session::negotiate::Negotiated;

use super::messages::{JobDone, JobProgress, PullJob};
use super::{Client, CopyOptions, SessionError};

/// Which server a third-party copy's failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The server the files come from (it refused the grant, or its session failed).
    Source,
    /// The server the files go to (it refused the job, or the job failed; its message says
    /// when the source was the cause).
    Destination,
}

/// The data channels' settings the destination proposes to the source: controller, rates and
/// packet size of `channel`, and `channels` of them (`None`: the destination's default).
#[derive(Debug, Clone, Copy)]
pub struct DataSettings<'a> {
    /// Controller, rates, packet size.
    pub channel: &'a ChannelConfig,
    /// How many channels.
    pub channels: Option<u32>,
}

/// Copies `sources` (paths on `source`'s side, under the client's root there) to `dest` (on
/// `destination`'s side) as a job of the destination's, and follows it to its end, calling
/// `progress` as the destination reports. When this end goes away the job goes on.
pub async fn copy_between(
    source: &Client,
    destination: &Client,
    sources: &[String],
    dest: &str,
    options: &CopyOptions,
    data: DataSettings<'_>,
    progress: impl FnMut(JobProgress) + Send,
) -> Result<JobDone, (Side, SessionError)> {
    options.check().map_err(|e| (Side::Destination, e))?;
    let granted = source
        .grant(destination.server_fingerprint(), sources)
        .await
        .map_err(|e| (Side::Source, e))?;
    let mut spec = Negotiated::proposal(data.channel, data.channels.unwrap_or(1));
    spec.max_channels = data.channels.unwrap_or(0);
    let job = PullJob {
        source: source.server_address().to_string(),
        source_fingerprint: source.server_fingerprint().to_string(),
        grant: granted.grant,
        job: granted.job,
        paths: sources.to_vec(),
        dest: dest.to_owned(),
        recursive: options.recursive,
        links: options.links,
        overwrite: options.overwrite,
        checksum: options.checksum,
        preserve: options.preserve,
        compress: options.compress,
        dry_run: options.dry_run,
        spec,
    };
    destination.pull(job, progress).await.map_err(|e| (Side::Destination, e))
}
