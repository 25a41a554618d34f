"""The report's survival plot, in the Time to accuracy section: per case, the share of its seeds at
the target against training steps and against estimated seconds
(`dstbench.results.survival.survival_curves`)."""

from __future__ import annotations

import pandas as pd

from dstbench.report.figures import Plot, legend_outside, new_figure
from dstbench.report.sections import register_plot
from dstbench.report.time_to_accuracy import method_colors
from dstbench.results.survival import survival_curves

LINESTYLES = ("-", "--", ":", "-.")


@register_plot(
    "time_to_accuracy_survival", "Time to accuracy: seeds at the target", order=166,
    caption="Per case, the share of its seeds whose test top-1 has reached the target by each training step (left) "
    "and by each estimated training second (right; the step priced at the case's measured step and update times). "
    "A step rises by 1/n at a seed's first crossing (interpolated between evaluations, so it is known only to within "
    "the evaluation period); a seed that failed or never reached it stays out, so such a case ends below 1 at its "
    "last evaluation. Colour is the method, the line style the density. With one seed a curve is one step: it says "
    "when that seed got there, not how often the method does.",
)
def survival_plot(derived: pd.DataFrame) -> Plot | None:
    steps, seconds = survival_curves(derived, "steps"), survival_curves(derived, "seconds")
    if steps.empty:
        return None
    colors = method_colors(derived)
    densities = sorted(pd.unique(steps["density"]), reverse=True)
    style = {d: LINESTYLES[i % len(LINESTYLES)] for i, d in enumerate(densities)}
    panels = [(steps, "training steps")] + ([(seconds, "estimated training seconds")] if not seconds.empty else [])
    figure, axes = new_figure(width=4.2 * len(panels), height=3.6, ncols=len(panels), sharey=True, squeeze=False)
    handles, labels = [], []
    for ax, (curves, xlabel) in zip(axes[0], panels):
        for (run, point, case), curve in curves.groupby(["run", "point", "case_id"], sort=False):
            first = curve.iloc[0]
            (line,) = ax.step(curve["x"], curve["reached"] * 100, where="post", color=colors.get(str(first["method"])),
                              linestyle=style[first["density"]], linewidth=1.4)
            label = f"{case} ({int(first['seeds'])} seed{'s' if first['seeds'] != 1 else ''})"
            if label not in labels:
                handles.append(line)
                labels.append(label)
        ax.set(xlabel=xlabel, ylim=(-3, 103))
    axes[0][0].set_ylabel("seeds at the target (%)")
    legend_outside(figure, handles, labels)
    finals = steps.groupby("case_id", sort=False)["reached"].last()
    alt = "Share of seeds at the target, at the end: " + "; ".join(f"{case} {share:.0%}" for case, share in finals.items()) + "."
    return Plot(figure, alt=alt)
