//! The request path, one step per module: tenant → cell and subset
//! ([`crate::cell`]) → the tenant's limits ([`admission`]) → the body set-up
//! ([`body_setup`]) → the attempts
//! ([`attempts`]: member ([`member`]) → attempt ([`attempt`]), until one
//! answers) → outcome ([`proxy`], which runs the steps in order, and
//! [`response`], the body that streams back and reports how it ended;
//! [`record`], what a request's metrics, access log and trace keep of it;
//! [`peer`], the connection a request came on;
//! [`grpc`] for what differs for a gRPC call, [`refusal`] for the
//! gateway's own error answers, [`unanswered`] for the answer when no
//! member answered), or, for a WebSocket upgrade, a tunnel
//! ([`tunnel`], over [`splice`]). It never imports the listeners or the
//! operations side.

pub(crate) mod admission;
pub(crate) mod attempt;
pub(crate) mod attempts;
pub(crate) mod body_setup;
pub(crate) mod containment;
pub mod grpc;
pub(crate) mod member;
pub mod peer;
pub mod proxy;
pub(crate) mod record;
pub mod refusal;
pub mod response;
pub(crate) mod splice;
pub(crate) mod tunnel;
pub(crate) mod unanswered;
