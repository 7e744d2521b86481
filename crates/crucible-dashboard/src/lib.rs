//! The web dashboard of `crucible serve`: the gym at a glance.
//!
//! Server-rendered pages (maud) over the queue's [`Store`], plus one small script that swaps in
//! the home page's live sections from a server-sent event stream. No build step, no chart
//! library: plots are SVG drawn on the server (plotters).
//!
//! Candidate code is hostile, and so is every string in a result document: everything is
//! rendered through maud, which escapes it; the pages run no inline script, and the responses
//! carry a content security policy that allows only the dashboard's own script.

mod auth;
mod pages;
mod plots;
mod routes;
mod view;

pub use routes::{Dashboard, router};
