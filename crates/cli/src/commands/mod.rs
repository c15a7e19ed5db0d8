//! One module per subcommand that is more than a call into a library:
//! each takes the flags it was given and does the work.

pub(crate) mod archive;
pub(crate) mod check;
pub(crate) mod diff;
pub(crate) mod probe;
pub(crate) mod serve;
