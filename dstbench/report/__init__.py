"""Reports from run folders: derived figures, tables, plots, one self-contained HTML page per
report, and a static site of runs.

    (the derived frame it reads: dstbench.results.derive, through dstbench.results.run_folder.RunFolder)
    figures.py      below every plot: `Plot`, `plot_style`, `new_figure` and the phone layout,
                    `palette`, `legend_outside`, `coincident_groups`, `figure_to_uri`
    sections.py     the registry of report sections (below); imports figures only
    expectations.py the suites' expectations (PASS / FAIL / SKIPPED) and each run's coverage
    tables.py       core table sections; tabulate rendering for the terminal and Markdown
    plots.py        core plot sections (seaborn): colour is the method, marker the density
    environment.py  run, machine and GPU-clock tables
    compact_topology.py  a compact method's topology history from `method_extras`; the exchanges table
    tracker_fields.py    the registered trackers' fields no other table shows
    seeds.py        runs that differ only in their seed: means and intervals over seeds
    html.py         jinja2 pages (templates/*.j2, autoescaped); `dstbench report`'s HTML and Markdown
    headline.py     the reference a report compares against; the headline above its tables
    publish.py      the site `dstbench publish` writes; history.py: each case across a site's runs
    generated_readme.py  the generated block of a reports/*/README.md (reports/*/make_readme.py)

Adding sections
---------------
A report is a list of sections in `order`; each is a function of the derived frame (the output of
`dstbench.results.derive.derive`: every result-line field, the derived columns, `run` = the run folder,
`frame.attrs["reference"]`, and `frame.attrs["output_dir"]`, the folder the page is written to or
None: a section linking a file of the run folder makes the link relative to it with
`os.path.relpath`, so it survives `dstbench publish`, which copies the `profile.trace` and
`profile.memory_snapshot` files of each result line next to the run's page). It returns None when its data is absent, and the section is left out.
A module registers sections with decorators at import time:

    from dstbench.report.sections import Table, register_plot, register_table
    from dstbench.report.figures import Plot, legend_outside, new_figure   # no pyplot needed

    @register_plot("my_plot", "Title", order=170, caption="What the plot shows.")
    def my_plot(derived: pd.DataFrame) -> Plot | None:
        figure, ax = new_figure()
        ...
        legend_outside(ax)
        return Plot(figure, alt="The numbers it shows, as text.", title="What is plotted, if the data decides it")

    @register_table("my_table", "Title", order=180, terminal=False)
    def my_table(derived: pd.DataFrame) -> Table | None:
        return Table(headers=[...], rows=[[...], ...], align=["left", "right", ...], note="...")

and is listed in `sections.SECTION_MODULES` (a module that is not there yet is skipped). Keys are
unique and become HTML anchors.

A separately installed package adds sections through the entry-point group
`dstbench.report_sections`: each entry point names a module whose import registers them, as above.

    [project.entry-points."dstbench.report_sections"]
    my_sections = "my_package.report_sections"

These modules are imported once per process, after `SECTION_MODULES` (`sections.load_section_plugin`).
One that raises at import is a warning naming the entry point and contributes no section; the
report is built without it. A plugin adds keys: one that registers a key already taken keeps the
earlier section (and warns). `examples/dstbench-example-plugin/` is a complete package with a
method and a section. Orders: expectations 5, core tables 10-40, core plots 100-165,
profiling 170-199, environment 890-910. Plots are drawn inside `figures.plot_style()` (text is never
parsed as math), twice: once as they are and once inside `figures.narrow_layout()`, where
`new_figure` makes them phone-wide and `legend_outside` puts legends below (a builder with several
panels side by side stacks them when `figures.is_narrow()`); the page shows the phone layout on
narrow screens. A builder may return a bare Figure (its alt text is then its title). Both are
embedded as SVG data: URIs; tables go to the HTML page (every cell escaped, except
`markupsafe.Markup` cells, which must be built with `Markup(...).format(...)` so their arguments
are escaped), to `--markdown` and, when `terminal` is true, to the terminal. A section that raises
is shown with its error instead of its content, so one broken section never costs the report. The
HTML template needs no change for a new section.
"""
