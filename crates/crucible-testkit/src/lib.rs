//! Test support shared by the workspace's integration tests and benches (a dev-dependency only;
//! nothing in a shipped binary links it).

mod redis_server;

pub use redis_server::{AppendFsync, RedisServer};
