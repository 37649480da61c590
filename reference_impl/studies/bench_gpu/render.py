"""The plots of a GPU run."""
from __future__ import annotations

from pathlib import Path



def plot(data: dict, out_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for dn, by_shape in data["results"].items():
        for mode in ("forward", "residual", "forward_backward"):
            shapes = [s for s in by_shape if mode in by_shape[s]]
            if not shapes:
                continue
            impls = list(by_shape[shapes[0]][mode])
            fig, ax = plt.subplots(figsize=(9, 4))
            width = 0.8 / len(impls)
            for j, impl in enumerate(impls):
                vals = [by_shape[s][mode].get(impl) for s in shapes]
                med = [v["gbps"] if v else 0.0 for v in vals]
                lo = [v["gbps"] - v.get("gbps_min", v["gbps"]) if v else 0.0 for v in vals]
                hi = [v.get("gbps_max", v["gbps"]) - v["gbps"] if v else 0.0 for v in vals]
                ax.bar([i + j * width for i in range(len(shapes))], med, width, yerr=[lo, hi], capsize=1.5,
                       label=impl)
            ax.set_xticks([i + 0.4 - width / 2 for i in range(len(shapes))], shapes)
            ax.set_ylabel("GB/s (minimum bytes)")
            ax.set_title(f"{data['device']['name']}, {dn}, {mode} ({data['provenance']['date'][:10]}); "
                         "bars: median, whiskers: min-max of repetitions", fontsize=8)
            ax.legend(fontsize=6, ncol=4)
            fig.tight_layout()
            path = out_dir / f"bench_gpu_{dn}_{mode}.svg"
            fig.savefig(path, metadata={"Date": None})
            plt.close(fig)
            written.append(str(path))
    return written
