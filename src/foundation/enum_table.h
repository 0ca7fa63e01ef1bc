// Tables that describe each value of an enum once (its name in messages, the
// library constant it maps to, its size, ...), so that one row holds what a
// switch per property would otherwise spell out again, enumerator by
// enumerator. Each row names its enumerator in a member called `value`.
// Internal to the layers that stand on foundation.
#pragma once

#include <cstddef>

namespace baton {

// The row of `rows` that describes `value`, or nullptr when none does (a value
// cast from an out-of-range integer): callers say what stands for it.
template <typename Row, std::size_t N, typename Value>
[[nodiscard]] constexpr const Row* FindRow(const Row (&rows)[N], Value value) {
  for (const Row& row : rows) {
    if (row.value == value) return &row;
  }
  return nullptr;
}

// One property of `value`: the `column` of its row, or `otherwise` when no
// row describes it.
template <typename Row, std::size_t N, typename Value, typename Column, typename Otherwise>
[[nodiscard]] constexpr Column ColumnOf(const Row (&rows)[N], Value value, Column Row::*column,
                                        Otherwise otherwise) {
  const Row* row = FindRow(rows, value);
  return row != nullptr ? row->*column : static_cast<Column>(otherwise);
}

// The row whose `name` member equals `name` (a parser's lookup), or nullptr.
template <typename Row, std::size_t N, typename Name>
[[nodiscard]] constexpr const Row* FindRowNamed(const Row (&rows)[N], const Name& name) {
  for (const Row& row : rows) {
    if (name == row.name) return &row;
  }
  return nullptr;
}

}  // namespace baton
