//! Server-rendered HTML for people who do not write code: the operator's status page
//! (`/`), the search (`/search?q=`) and case (`/cases/{year}/{number}`) pages, and
//! the pages behind the API's problem types (`/problems/{kind}`).
//!
//! Owns HTML only. The status page reads `status::collect` (read only); the search and
//! case pages read the projections through `read::queries`, the same queries as the
//! API, with the same phase gate and the same masking of personal data. No route here
//! writes, and no page needs JavaScript. It stands on [`crate::read`] and never imports
//! `api`; [`crate::http`] mounts both.

mod html;
mod pages;
pub mod problems;
pub mod status_page;

use axum::Router;
use axum::routing::get;

use crate::read::ReadState;

/// The status page (operator surface).
pub fn status_router(state: ReadState) -> Router {
    Router::new()
        .route("/", get(status_page::status))
        .with_state(state)
}

/// The search and case pages (reader surface).
pub fn reader_router(state: ReadState) -> Router {
    Router::new()
        .route("/search", get(pages::search))
        .route("/cases/{year}/{number}", get(pages::case))
        .route("/problems/{kind}", get(problems::problem))
        .with_state(state)
}

pub use html::escape;
