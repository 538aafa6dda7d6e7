//! One rate budget for the several channels of a transfer.
//!
//! (Contract stub: the coupling is not implemented yet; each member runs its own controller.)

use std::sync::Arc;

use super::CongestionControl;
use crate::config::ChannelConfig;

/// Shared by the channels of one transfer: they pace from one controller's rate.
#[derive(Debug)]
pub struct CouplingGroup {
    config: ChannelConfig,
    channels: usize,
}

impl CouplingGroup {
    /// A group for `channels` channels running `config.cc`.
    pub fn new(config: &ChannelConfig, channels: usize) -> Arc<Self> {
        Arc::new(Self { config: config.clone(), channels: channels.max(1) })
    }

    /// The controller channel `channel` (0-based, below the group's size) hands its sender.
    pub fn member(self: &Arc<Self>, channel: usize) -> Box<dyn CongestionControl> {
        let _ = channel;
        super::build(&self.config)
    }

    /// Says whether channel `channel` has data to send; the rate is split among the active
    /// channels. A channel that ended (finished or died) is set inactive for good by its driver.
    pub fn set_active(&self, channel: usize, active: bool) {
        let _ = (channel, active);
    }

    /// Number of channels the group was made for.
    pub fn channels(&self) -> usize {
        self.channels
    }
}
