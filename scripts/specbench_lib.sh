# specbench_lib.sh — what the Spec-Bench experiments' summaries share; sourced by their run.sh
# (needs $B, the binary, and $O, the run folder).

# spec_row NAME TAG MODE: one table row of run $O/TAG from `report --json` (made here for runs
# reported before --json existed); MODE as scripts/specbench_row.py takes it (tau-wall, dec-wall)
spec_row() {
    [ -f "$O/$2.metrics.json" ] || $B report "$O/$2.h5" --json "$O/$2.metrics.json" > /dev/null
    python3 scripts/specbench_row.py "$1" "$O/$2.metrics.json" "$3"
}

# sps_block: this machine's SPS(B) table, as the summaries end with it
sps_block() {
    echo "SPS(B) of this machine (what greedy prices a verification with):"
    echo
    echo '```'
    sed -n '/^SPS(B)/,$p' "$O/sps.txt"
    echo '```'
}
