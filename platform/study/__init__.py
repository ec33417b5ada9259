"""Study room: the experiment spec, the runner that plans/resumes a whole study, and its report."""
