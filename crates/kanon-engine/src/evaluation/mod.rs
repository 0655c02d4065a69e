//! What a request is evaluated with besides the policies and the request itself, the same for
//! every rule language: the lookups that read the world outside the request, where hand-written
//! programs run, and when the caller stops waiting ([`Evaluation`]); and where one policy's rules
//! run on one request (`Scope`).

mod pause;
mod scope;

pub use pause::Pause;
pub(crate) use scope::{RequestDocuments, Scope};

use crate::host::ProgramHost;
use crate::lookup::Lookup;
use crate::owners::OwnerTrust;
use crate::request::Deadline;

/// The context of one evaluation: lookups, the program host and the deadline. Built by the
/// caller (the webhook: bounded lookups, its worker processes, the review's `?timeout=`);
/// [`PolicySet::mutate`](crate::PolicySet::mutate) and its siblings build one from a lookup
/// alone, with the request's [`Request::deadline`](crate::Request::deadline).
#[derive(Clone)]
pub struct Evaluation<'a> {
    lookup: &'a dyn Lookup,
    programs: Option<&'a dyn ProgramHost>,
    deadline: Option<Deadline>,
    pause: Option<Pause>,
    now: Option<i64>,
    owner_trust: OwnerTrust,
}

impl<'a> Evaluation<'a> {
    /// An evaluation over `lookup`, running programs in the calling thread, without a deadline.
    pub fn new(lookup: &'a dyn Lookup) -> Self {
        Evaluation {
            lookup,
            programs: None,
            deadline: None,
            pause: None,
            now: None,
            owner_trust: OwnerTrust::default(),
        }
    }

    /// Runs hand-written programs in `host` (see [`crate::host`]); `None`: in the calling
    /// thread.
    pub fn with_programs(mut self, host: Option<&'a dyn ProgramHost>) -> Self {
        self.programs = host;
        self
    }

    /// Stops running policies once `deadline` has passed: those left fail under their own
    /// failure policy. `None`: no deadline.
    pub fn with_deadline(mut self, deadline: Option<Deadline>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Asks `pause`, between policies and between a policy's steps, whether to let the
    /// caller's executor run something else for a moment ([`Pause`]). `None`: never paused.
    pub fn with_pause(mut self, pause: Option<Pause>) -> Self {
        self.pause = pause;
        self
    }

    /// The time of the request, in Unix seconds, which decides whether a PolicyException has
    /// expired (the engine reads no clock). `None`: no time given, and exceptions that
    /// expire do not apply.
    pub fn with_now(mut self, now: Option<i64>) -> Self {
        self.now = now;
        self
    }

    /// Whose objects a PolicyException selecting their owner reaches ([`OwnerTrust`]; by
    /// default those kube-controller-manager's workload controllers write).
    pub fn with_owner_trust(mut self, trust: OwnerTrust) -> Self {
        self.owner_trust = trust;
        self
    }

    /// [`Evaluation::with_owner_trust`].
    pub fn owner_trust(&self) -> &OwnerTrust {
        &self.owner_trust
    }

    /// The time of the request ([`Evaluation::with_now`]).
    pub fn now(&self) -> Option<i64> {
        self.now
    }

    /// Read access to the world outside the request.
    pub fn lookup(&self) -> &'a dyn Lookup {
        self.lookup
    }

    /// Where hand-written programs run; `None`: in the calling thread.
    pub fn programs(&self) -> Option<&'a dyn ProgramHost> {
        self.programs
    }

    /// Pauses once if the caller's [`Pause`] says so (see [`Evaluation::with_pause`]).
    pub(crate) async fn pause_point(&self) {
        if self.pause.as_ref().is_some_and(Pause::due) {
            pause::YieldOnce::new().await;
        }
    }

    /// Whether the deadline (if any) has passed.
    pub fn deadline_passed(&self) -> bool {
        self.deadline.as_ref().is_some_and(Deadline::passed)
    }
}

impl std::fmt::Debug for Evaluation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evaluation")
            .field("programs", &self.programs.is_some())
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}
