"""Reports from run folders: derived figures (`derive`), tables, plots, HTML and static sites."""
