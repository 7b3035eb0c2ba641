"""The gate: nothing changes without a yes.

A call is resolved to its effect (`effects.py`, with `runs_later.py`, the one registry of files something runs
later); its risk and the run's autonomy decide, through the approval table and authorization (`policy.py`),
whether it runs, is proposed, or is refused; a person's yes ahead of time is a grant (`grant_terms.py`, what one
covers; `grant_backing.py`, whether the log backs one; `grants.py`, which are in force); `approval.py` is the only
place a call is let through; `deciders.py` is who answers. Below the runtime, which calls it; above the events,
the store and the scope, which it reads."""
