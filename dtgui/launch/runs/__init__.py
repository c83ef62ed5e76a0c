"""A run as the policy and the views see it: what the policy may do, what a view reads (live or ended), processes that outlive dtgui."""
