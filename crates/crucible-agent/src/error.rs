//! The agent's own failures. A bad kernel is never one of them: that is a verdict in a record.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("chat client: {0}")]
    Client(String),
    #[error("model server: {0}")]
    Server(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}, line {line}: {source}")]
    BadRecord {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    #[error("suite `{0}`: {1}")]
    Suite(String, String),
    #[error(
        "{path} was written by a run with other settings ({what}); resume with the same settings or use another --out"
    )]
    ResumeMismatch { path: PathBuf, what: String },
    #[error("writing {path}: {message}")]
    Output { path: PathBuf, message: String },
    #[error(transparent)]
    Rl(#[from] crucible_rl::Error),
    #[error("{0}")]
    Config(String),
}

impl Error {
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }

    pub fn output(path: impl Into<PathBuf>) -> impl FnOnce(String) -> Error {
        let path = path.into();
        move |message| Error::Output { path, message }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
