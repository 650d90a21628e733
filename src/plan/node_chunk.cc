// Placeholder for the node_chunk planner (issue 3); replaced by the real planner.
#include <stdexcept>

#include "planners.h"

namespace treeattn::planners {

Plan node_chunk(const PrefixTree&, const TreeIndex&, const PlanOptions&) {
  throw std::invalid_argument("planner: 'node_chunk' is not implemented yet");
}

}  // namespace treeattn::planners
