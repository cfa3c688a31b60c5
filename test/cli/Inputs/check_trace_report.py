#!/usr/bin/env python3
"""Checks the "Predicted vs measured" section of a `dtc plan report --trace`
page in headless Chromium.

  check_trace_report.py REPORT.html [--screenshot OUT.png]

Drives the browser exactly as ../check_report.py does (no console error, no
exception, no network request: its checks fail the run), with a probe of
its own: per pipeline stage one predicted and one measured lane that both
draw instructions (the measured ones GEMM-dominated boxes), every rect
inside the plot (one time axis for both), the
deviation table's rows and their measured/predicted ratios, and the
page's other timeline still there. Prints the counts as JSON.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import check_report  # noqa: E402

PROBE = r"""
(function(){
  var q = function(s){ return document.querySelectorAll(s); };
  var r = {};
  r.predicted_lanes = q('#trace-gantt .trace-lane[data-kind="predicted"]').length;
  r.measured_lanes = q('#trace-gantt .trace-lane[data-kind="measured"]').length;
  r.lanes_with_work = 0;
  r.lanes_with_communication = 0;
  r.measured_lanes_with_gemm = 0;
  q('#trace-gantt .trace-lane').forEach(function(l){
    if (l.querySelector('rect.ev.gemm, rect.ev.kernel, rect.ev.post, rect.ev.wait')) r.lanes_with_work++;
    if (l.querySelector('rect.ev.comm')) r.lanes_with_communication++;
    if (l.getAttribute('data-kind') == 'measured' && l.querySelector('rect.ev.gemm'))
      r.measured_lanes_with_gemm++;
  });
  var stages = {};
  q('#trace-gantt .trace-lane').forEach(function(l){
    stages[l.getAttribute('data-stage') + '/' + l.getAttribute('data-kind')] = 1; });
  r.stage_rows = Object.keys(stages).length;
  // One axis: every drawn interval lies in the plot [150, 1084].
  r.rects_outside_plot = 0;
  q('#trace-gantt rect.ev').forEach(function(e){
    var x = +e.getAttribute('x'), w = +e.getAttribute('width');
    if (x < 149.9 || x + w > 1084.6) r.rects_outside_plot++; });
  r.events = q('#trace-gantt rect.ev').length;
  r.deviation_rows = q('#deviations tr.dev').length;
  r.deviation_ratios = 0;
  q('#deviations tr.dev').forEach(function(row){
    var cells = row.querySelectorAll('td');
    var ratio = cells[cells.length - 1].textContent;
    // A wait predicted to block for no time has no ratio.
    if (/^x[0-9]+\.[0-9]{2}$/.test(ratio) ||
        (ratio == '-' && cells[cells.length - 3].textContent == '0 s')) r.deviation_ratios++; });
  r.trace_cards = q('#trace .card').length;
  r.plan_lanes = q('#gantt .lane').length;
  r.height = document.documentElement.scrollHeight;
  r.gpu_boxes = q('#mesh .gpu').length;
  return JSON.stringify(r);
})()
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--screenshot")
    parser.add_argument("--max-load-s", type=float, default=2.0)
    args = parser.parse_args()
    check_report.PROBE = PROBE
    page = argparse.Namespace(report=args.report, screenshot=args.screenshot,
                              clip=None, expect_gpus=None,
                              expect_summarized=None, expect_lanes=None,
                              max_load_s=args.max_load_s)
    check_report.check_page(page)


if __name__ == "__main__":
    main()
