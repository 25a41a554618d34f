"""A suite: its schema (`schema`), reading suite files (`loading`), its cases (`cases`), the groups
they are timed in (`groups`) and the plan of a run (`plan`)."""
