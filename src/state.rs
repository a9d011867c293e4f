//! The state shared by every transport.

use std::sync::Arc;

use crate::config::Settings;
use crate::store::Store;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub settings: Arc<Settings>,
}
