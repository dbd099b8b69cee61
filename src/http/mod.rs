//! The HTTP plumbing every feature shares. No feature lives here.
//!
//! * [`buyer`]: who is buying, a signed cookie. A session holds only a display name
//!   ([`sessions`]).
//! * [`secrets`]: the signing secrets, one that signs and those accepted during a
//!   rotation. [`csrf`]: the CSRF defences. [`ids`]: the ids a URL names, parsed once.
//! * [`error`]: one error type that maps every failure to a status and a page.
//! * [`deadline`]: the request deadline and the body limit. [`detached`]: work that
//!   finishes when the client hangs up.
//! * [`serve`]: the connection-level server. [`headers`]: the security headers.
//! * [`proxy`]: the buyer's origin behind a TLS proxy. [`health`]: the health checks.
//!
//! A few imports point up. [`detached`] carries the pause seam's pause
//! ([`crate::failpoint`]) onto the task it spawns. [`health`] and [`deadline`] read
//! the application's state ([`crate::state`]). [`buyer`] reads the buyer's name as a
//! [`crate::profile::BuyerProfile`], the data type of the profile feature.

pub mod buyer;
pub mod csrf;
pub mod deadline;
pub mod detached;
pub mod error;
pub mod headers;
pub mod health;
pub mod ids;
pub mod proxy;
pub mod secrets;
pub mod serve;
pub mod sessions;
