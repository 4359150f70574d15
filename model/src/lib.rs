//! The Rebalanser protocol as a checked model (docs/protocol.md, "What is checked").

pub mod conform;
pub mod model;
pub mod run;
