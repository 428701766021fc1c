"""DSA problem types and MiniMalloc CSV import/export."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import given

from roam_core.base.errors import PlanFormatError
from roam_core.formats.dsa_csv import dumps_problem, load_problem, loads_problem, save_problem
from roam_core.model.dsa import Buffer, Problem, Solution, solution_from_problem
from tests.strategies import problems


class TestProblem:
    def test_lower_bound_is_max_live_sum(self) -> None:
        p = Problem((Buffer("a", 0, 2, 3), Buffer("b", 1, 3, 4), Buffer("c", 2, 4, 5)))
        assert p.lower_bound() == 9  # b and c at step 2

    def test_half_open_lifetimes_do_not_touch(self) -> None:
        p = Problem((Buffer("a", 0, 2, 3), Buffer("b", 2, 4, 4)))
        assert p.lower_bound() == 4
        assert not p.buffers[0].overlaps(p.buffers[1])

    @pytest.mark.parametrize(("buf", "words"), [
        (Buffer("a", 2, 2, 1), "empty lifetime"),
        (Buffer("a", 0, 1, -1), "negative size"),
        (Buffer("a", 0, 1, 1, 0), "alignment"),
        (Buffer("a", 0, 1, 1, 1, -4), "negative fixed offset"),
    ])
    def test_bad_buffers_raise(self, buf: Buffer, words: str) -> None:
        with pytest.raises(PlanFormatError, match=words):
            Problem((buf,))

    def test_duplicate_ids_raise(self) -> None:
        with pytest.raises(PlanFormatError, match="duplicate"):
            Problem((Buffer("a", 0, 1, 1), Buffer("a", 1, 2, 1)))

    def test_solution_from_fixed_offsets(self) -> None:
        p = Problem((Buffer("a", 0, 1, 4, offset=0), Buffer("b", 0, 1, 4, offset=4)))
        assert solution_from_problem(p) == Solution((0, 4), 8)
        assert solution_from_problem(Problem((Buffer("a", 0, 1, 4),))) is None


class TestCsv:
    def test_reads_minimalloc_toy(self, minimalloc) -> None:
        p = load_problem(f"{minimalloc}/input.12.csv", capacity=12)
        assert p.capacity == 12
        assert [b.id for b in p.buffers] == ["b1", "b2", "b3", "b4", "b5"]
        assert p.lower_bound() == 12

    @given(problems())
    def test_round_trip(self, p: Problem) -> None:
        assert loads_problem(dumps_problem(p)) == p

    @given(problems(max_buffers=5))
    def test_round_trip_with_solution_fixes_offsets(self, p: Problem) -> None:
        sol = Solution.from_offsets(p, [3 * i for i in range(len(p))])
        back = loads_problem(dumps_problem(p, sol))
        assert solution_from_problem(back) == sol or not len(p)

    def test_alignment_and_fixed_columns(self) -> None:
        p = Problem((Buffer("a", 0, 1, 4, 2, 8), Buffer("b", 0, 1, 4, 4)))
        text = dumps_problem(p)
        assert text.splitlines()[0] == "id,lower,upper,size,alignment,offset"
        assert loads_problem(text) == p

    def test_gzip_and_files(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        p = Problem((Buffer("a", 0, 1, 4),), 4)
        save_problem(tmp_path / "p.csv.gz", p)
        with gzip.open(tmp_path / "p.csv.gz", "rt") as f:
            assert f.read().startswith("id,")
        assert load_problem(tmp_path / "p.csv.gz", capacity=4) == p

    @pytest.mark.parametrize(("text", "words"), [
        ("id,lower,size\na,0,1\n", "lacks column"),
        ("id,lower,upper,size\na,0,x,1\n", "row 1: 'upper'"),
        ("id,lower,upper,size\na,0,1,1\nb,3,3,1\n", "row 2: empty lifetime"),
        ("id,lower,upper,size\na,0,1,1\na,0,1,1\n", "row 2: duplicate id"),
        ("id,lower,upper,size\na,0,1,1,9\n", "row 1: more cells"),
        ("id,lower,upper,size\n,0,1,1\n", "row 1: empty 'id'"),
        ("id,lower,upper,size\na,0,1,-1\n", "row 1: negative"),
    ])
    def test_malformed_csv_names_the_row(self, text: str, words: str) -> None:
        with pytest.raises(PlanFormatError, match=words):
            loads_problem(text)

    def test_missing_file_is_typed(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        with pytest.raises(PlanFormatError, match="cannot read"):
            load_problem(tmp_path / "nope.csv")
