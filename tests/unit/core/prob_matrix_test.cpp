// ProbMatrix, the owning row buffer drafters and verifiers fill: rows out of
// range and rows of a matrix without a vocabulary are typed errors.
#include "specdec/core/prob_matrix.hpp"

#include <utility>

#include "support/catch.hpp"

namespace sd = specdec;

TEST_CASE("ProbMatrix refuses rows it does not have", "[unit][core][errors]") {
  sd::ProbMatrix none;
  CHECK_THROWS_AS(none.append_row(), sd::ShapeError);  // no vocabulary: no 0-wide row
  CHECK(none.num_rows() == 0);
  sd::ProbMatrix m(0, 3);
  auto r = m.append_row();
  REQUIRE(r.size() == 3);
  r[1] = 1.0f;
  CHECK(m.num_rows() == 1);
  CHECK(m.row(0)[1] == 1.0f);
  CHECK(std::as_const(m).row(0)[1] == 1.0f);
  CHECK_THROWS_AS(m.row(1), sd::ShapeError);
  CHECK_THROWS_AS(m.row(-1), sd::ShapeError);
  CHECK_THROWS_AS(std::as_const(m).row(1), sd::ShapeError);
  m.resize(0, 0);
  CHECK_THROWS_WITH(m.append_row(), Catch::Contains("no vocabulary"));
}
