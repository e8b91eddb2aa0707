"""A binary min-heap over parallel key/value arrays, compiled with Numba (used by the flow solver's
link queue and the property cache's pending fills)."""

from sparsewire._lib.jit import njit

__all__ = ["heap_push", "heap_pop"]


@njit(cache=True)
def heap_push(keys, values, size, key, value):
    """Push (key, value) onto the binary min-heap in keys[:size], values[:size]; returns the new size."""
    position = size
    keys[position] = key
    values[position] = value
    while position > 0:
        parent = (position - 1) >> 1
        if keys[parent] <= keys[position]:
            break
        keys[parent], keys[position] = keys[position], keys[parent]
        values[parent], values[position] = values[position], values[parent]
        position = parent
    return size + 1


@njit(cache=True)
def heap_pop(keys, values, size):
    """Pop the smallest key: returns (key, value, new size)."""
    key, value = keys[0], values[0]
    size -= 1
    keys[0], values[0] = keys[size], values[size]
    position = 0
    while True:
        left = 2 * position + 1
        if left >= size:
            break
        child = left
        if left + 1 < size and keys[left + 1] < keys[left]:
            child = left + 1
        if keys[position] <= keys[child]:
            break
        keys[child], keys[position] = keys[position], keys[child]
        values[child], values[position] = values[position], values[child]
        position = child
    return key, value, size
