//! The state shared by every transport.

use std::sync::Arc;

use crate::archive::worker::Archiver;
use crate::config::Settings;
use crate::fleet::Fleet;
use crate::publish::Hub;
use crate::store::Store;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub settings: Arc<Settings>,
    /// The newest published config of every chain, for Watch streams.
    pub hub: Hub,
    /// Agents connected to this replica.
    pub fleet: Fleet,
    /// The archive and its upload worker.
    pub archiver: Archiver,
    /// The archive key prefix in effect.
    pub archive_prefix: String,
    /// Agents' reports merged into rollups (SPEC §8).
    pub reports: Arc<crate::feedback::Reports>,
    /// Agent tokens of Watch, Ack and Report, resolved once per TTL.
    pub agent_tokens: Arc<crate::auth::TokenCache>,
    /// The approved baselines uploads compare with, kept parsed.
    pub approved: Arc<crate::service::approved::ApprovedBaselines>,
    /// Request bodies read whole (JSON), all requests together ([`crate::http::bodies::Bodies`]).
    pub bodies: crate::http::bodies::Bodies,
    /// Turns of load-tool uploads ([`crate::http::api::upload::Uploads`]).
    pub uploads: crate::http::api::upload::Uploads,
}
