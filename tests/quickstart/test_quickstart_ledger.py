"""The quickstart's ledger: a stage recorded by an older quickstart whose result lacks what the
current one records (the strict score, the kept model) is run again rather than read as done."""

from pipelines.quickstart.command import finished


def test_a_stage_recorded_without_what_it_records_now_is_run_again():
    old = {"data": {"rows": 3, "seconds": 1.0}, "eval_sft": {"sub_em": 0.9, "seconds": 2.0},
           "register": {"model": "models:/m/1", "alias": "production", "seconds": 0.1}}
    assert finished(old, "data") and not finished(old, "eval_sft") and not finished(old, "register")
    new = {"eval_sft": {"strict": 0.8, "sub_em": 0.9, "seconds": 2.0}, "register": {"kept": "sft", "seconds": 0.1}}
    assert finished(new, "eval_sft") and finished(new, "register") and not finished(new, "rl")
