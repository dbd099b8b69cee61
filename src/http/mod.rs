//! The HTTP plumbing every feature shares: the buyer's session ([`buyer`], stored by
//! [`sessions`]), CSRF defences ([`csrf`]), one error type that maps every failure to a
//! status and a page ([`error`]), the request deadline ([`deadline`]) and work detached
//! from a client that hangs up ([`detached`]), the connection-level server ([`serve`]),
//! the security headers ([`headers`]), the buyer's origin behind a TLS proxy
//! ([`proxy`]) and the health checks ([`health`]). No feature
//! lives here. [`detached`] carries the pause seam's pause ([`crate::failpoint`]) onto the
//! task it spawns.

pub mod buyer;
pub mod csrf;
pub mod deadline;
pub mod detached;
pub mod error;
pub mod headers;
pub mod health;
pub mod proxy;
pub mod serve;
pub mod sessions;
