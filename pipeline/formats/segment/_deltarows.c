/* Segment format 3's row encoder in C: the common rows of pipeline.formats.segment.delta.encode_events.
 *
 * Why C: delta-coding in Python cost the sink's writer 11-19 times the CPU of writing format 2 (about
 * 20 us a row), so format 3 could not be the default. Here a row costs a fraction of a microsecond.
 *
 * The Python code (delta._encode_row) stays the definition. This function only takes the rows whose
 * outcome it can decide without a patch and without doubt, and stops at any other row, which the
 * caller then encodes in Python before calling again; so the table never differs, only the speed
 * (tests/unit/test_segment_delta_native.py compares both on generated events). It relies on one
 * check made by the caller first: every value packs back to exactly its wire bytes (one msgpack call
 * over the whole list). A row it takes is then the row Python would write, and it rebuilds to its
 * bytes, because every field it leaves out as "the same as the base" is strictly equal to the base's
 * (same types all the way down, same map order, same float bits), which packs to the same bytes.
 *
 * It stops (the caller decides in Python) at: a value that is not an event list of the usual shape
 * (Python writes it raw), a field whose sameness with the base Python decides by a looser equality
 * than packing (1 == True == 1.0, -0.0 == 0.0, map order), an object or an event's own fields that
 * differ from the base's and would be patched, a lifecycle whose own fields do not fit the columns,
 * a number outside 64 bits.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define F_UID_SAME 1
#define F_UID_BIN 2
#define F_RV_INT 4
#define F_SH_SAME 8
#define F_OBJ_SAME 16
#define F_OBJ_PATCH 32
#define F_EXT_SAME 64
#define F_EXT_COLUMNS 256
#define MAX_DEPTH 64
#define RV_MAX_DIGITS 20

/* The columns, in this order, as the caller passes them. */
enum { C_OP, C_TS, C_KEY, C_UID, C_RV, C_SH, C_OBJ, C_EXT, C_OWN, C_PSH, C_ST, C_EN, N_COLUMNS };

/* Strictly equal: the same exact types at every depth, equal values, maps in the same order, floats
 * with the same bits and not NaN. 1 if so; 0 if not, or if unsure (the caller then stops). */
static int strict_equal(PyObject *a, PyObject *b, int depth) {
    if (a == b) return 1;
    PyTypeObject *t = Py_TYPE(a);
    if (t != Py_TYPE(b) || depth > MAX_DEPTH) return 0;
    if (t == &PyUnicode_Type || t == &PyBytes_Type || t == &PyLong_Type) {
        int eq = PyObject_RichCompareBool(a, b, Py_EQ);
        if (eq < 0) PyErr_Clear();
        return eq == 1;
    }
    if (t == &PyFloat_Type) {
        double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
        return !isnan(x) && memcmp(&x, &y, sizeof x) == 0;
    }
    if (t == &PyList_Type) {
        Py_ssize_t n = PyList_GET_SIZE(a);
        if (n != PyList_GET_SIZE(b)) return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!strict_equal(PyList_GET_ITEM(a, i), PyList_GET_ITEM(b, i), depth + 1)) return 0;
        }
        return 1;
    }
    if (t == &PyDict_Type) {
        if (PyDict_GET_SIZE(a) != PyDict_GET_SIZE(b)) return 0;
        Py_ssize_t pa = 0, pb = 0;
        PyObject *ka, *va, *kb, *vb;
        while (PyDict_Next(a, &pa, &ka, &va)) {
            if (!PyDict_Next(b, &pb, &kb, &vb)) return 0;
            if (!strict_equal(ka, kb, depth + 1) || !strict_equal(va, vb, depth + 1)) return 0;
        }
        return 1;
    }
    return 0; /* None and bools are singletons (a == b above); anything else: unsure */
}

/* delta_patch._same(a, b) for a field stored whole or left out (uid, spec hash): 1 same, 0 not, -1 unsure
 * (Python would call them the same but they may not pack the same, or a type this code does not know). */
static int same_scalar(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    PyTypeObject *t = Py_TYPE(a);
    if (t != Py_TYPE(b)) return 0;
    if (t == &PyUnicode_Type || t == &PyBytes_Type || t == &PyLong_Type) {
        int eq = PyObject_RichCompareBool(a, b, Py_EQ);
        if (eq < 0) {
            PyErr_Clear();
            return -1;
        }
        return eq;
    }
    if (t == &PyFloat_Type) {
        double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
        if (isnan(x) || isnan(y)) return 0; /* never equal in Python either */
        if (x != y) return 0;
        return memcmp(&x, &y, sizeof x) == 0 ? 1 : -1; /* -0.0 == 0.0 */
    }
    if (Py_IS_TYPE(a, Py_TYPE(Py_None)) || t == &PyBool_Type) return 0; /* singletons, a != b */
    if (t == &PyList_Type || t == &PyDict_Type) return strict_equal(a, b, 0) ? 1 : -1;
    return -1;
}

/* delta_patch._same(a, b) for the values of a patch: 1 same (and strictly: they pack the same), 0 not the
 * same for Python, -1 unsure (Python calls them the same but they may pack differently). */
static int same3(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    PyTypeObject *t = Py_TYPE(a);
    if (t != Py_TYPE(b)) return 0;
    if (t == &PyList_Type || t == &PyDict_Type) {
        if (strict_equal(a, b, 0)) return 1;
        int eq = PyObject_RichCompareBool(a, b, Py_EQ);
        if (eq < 0) {
            PyErr_Clear();
            return -1;
        }
        return eq ? -1 : 0;
    }
    return same_scalar(a, b);
}

#define REPLACE 0
#define MAP_PATCH 1
#define LIST_PATCH 2
#define DIFF_MAX_DEPTH 60 /* deeper: Python's (apply_patch refuses past 64) */

static PyObject *tagged(long tag, PyObject *a, PyObject *b) { /* steals a and b (b may be absent) */
    PyObject *t = PyLong_FromLong(tag);
    PyObject *out = (t == NULL || a == NULL) ? NULL : PyList_New(b == NULL ? 2 : 3);
    if (out == NULL) {
        Py_XDECREF(t);
        Py_XDECREF(a);
        Py_XDECREF(b);
        return NULL;
    }
    PyList_SET_ITEM(out, 0, t);
    PyList_SET_ITEM(out, 1, a);
    if (b != NULL) PyList_SET_ITEM(out, 2, b);
    return out;
}

static PyObject *NOT_MINE; /* diff's answer when the row is Python's */

/* delta_patch.diff(base, new): the same patch, or NOT_MINE (borrowed) where a sameness is unsure; new
 * reference otherwise, NULL on error. */
static PyObject *diff(PyObject *base, PyObject *new, int depth) {
    if (depth > DIFF_MAX_DEPTH) return NOT_MINE;
    if (PyDict_CheckExact(base) && PyDict_CheckExact(new)) {
        PyObject *changed = PyDict_New(), *added = PyList_New(0), *deleted = PyList_New(0);
        PyObject *k, *v, *result = NULL;
        Py_ssize_t pos = 0;
        if (changed == NULL || added == NULL || deleted == NULL) goto done;
        while (PyDict_Next(new, &pos, &k, &v)) {
            PyObject *old = PyDict_GetItemWithError(base, k);
            if (old == NULL && PyErr_Occurred()) goto done;
            PyObject *patch;
            if (old != NULL) {
                int same = same3(old, v);
                if (same < 0) {
                    result = NOT_MINE;
                    goto done;
                }
                if (same) continue;
                patch = diff(old, v, depth + 1);
                if (patch == NOT_MINE || patch == NULL) {
                    result = patch;
                    goto done;
                }
            } else {
                patch = tagged(REPLACE, Py_NewRef(v), NULL);
                if (patch == NULL || PyList_Append(added, k) < 0) {
                    Py_XDECREF(patch);
                    goto done;
                }
            }
            int failed = PyDict_SetItem(changed, k, patch);
            Py_DECREF(patch);
            if (failed) goto done;
        }
        pos = 0;
        while (PyDict_Next(base, &pos, &k, &v)) {
            int has = PyDict_Contains(new, k);
            if (has < 0 || (!has && PyList_Append(deleted, k) < 0)) goto done;
        }
        /* kept (the base's keys in new) + added must be new's order, else the whole value */
        Py_ssize_t i = 0, n = PyDict_GET_SIZE(new), a = 0;
        PyObject *order = PyList_New(0);
        if (order == NULL) goto done;
        pos = 0;
        while (PyDict_Next(base, &pos, &k, &v)) {
            int in_new = PyDict_Contains(new, k);
            if (in_new < 0 || (in_new && PyList_Append(order, k) < 0)) {
                Py_DECREF(order);
                goto done;
            }
        }
        for (a = 0; a < PyList_GET_SIZE(added); a++) {
            if (PyList_Append(order, PyList_GET_ITEM(added, a)) < 0) {
                Py_DECREF(order);
                goto done;
            }
        }
        int in_order = PyList_GET_SIZE(order) == n;
        pos = 0;
        for (i = 0; in_order && PyDict_Next(new, &pos, &k, &v); i++) {
            int eq = PyObject_RichCompareBool(PyList_GET_ITEM(order, i), k, Py_EQ);
            if (eq < 0) {
                Py_DECREF(order);
                goto done;
            }
            in_order = eq;
        }
        Py_DECREF(order);
        if (!in_order) {
            result = tagged(REPLACE, Py_NewRef(new), NULL);
        } else {
            result = tagged(MAP_PATCH, changed, deleted);
            changed = deleted = NULL; /* stolen */
        }
    done:
        Py_XDECREF(changed);
        Py_XDECREF(added);
        Py_XDECREF(deleted);
        return result;
    }
    if (PyList_CheckExact(base) && PyList_CheckExact(new) && PyList_GET_SIZE(base) == PyList_GET_SIZE(new)) {
        Py_ssize_t n = PyList_GET_SIZE(new);
        PyObject *items = PyDict_New();
        if (items == NULL) return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *a = PyList_GET_ITEM(base, i), *b = PyList_GET_ITEM(new, i);
            int same = same3(a, b);
            if (same < 0) {
                Py_DECREF(items);
                return NOT_MINE;
            }
            if (same) continue;
            PyObject *patch = diff(a, b, depth + 1);
            if (patch == NOT_MINE || patch == NULL) {
                Py_DECREF(items);
                return patch;
            }
            PyObject *index = PyLong_FromSsize_t(i);
            int failed = index == NULL || PyDict_SetItem(items, index, patch) < 0;
            Py_XDECREF(index);
            Py_DECREF(patch);
            if (failed) {
                Py_DECREF(items);
                return NULL;
            }
        }
        if (2 * PyDict_GET_SIZE(items) > n + 1) {
            Py_DECREF(items);
            return tagged(REPLACE, Py_NewRef(new), NULL);
        }
        return tagged(LIST_PATCH, items, NULL);
    }
    return tagged(REPLACE, Py_NewRef(new), NULL);
}

/* An exact int that fits 64 bits. */
static int as_i64(PyObject *o, long long *out) {
    if (!PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

static int hexval(Py_UCS1 c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* delta._uid_bytes: the 16 bytes of a canonical (lowercase, hyphenated) UUID text, else NULL with no
 * error set (or NULL with an error on memory exhaustion). */
static PyObject *uid_bytes(PyObject *uid) {
    if (!PyUnicode_CheckExact(uid) || PyUnicode_GET_LENGTH(uid) != 36 ||
        PyUnicode_KIND(uid) != PyUnicode_1BYTE_KIND)
        return NULL;
    const Py_UCS1 *s = PyUnicode_1BYTE_DATA(uid);
    uint8_t out[16];
    int j = 0;
    for (int i = 0; i < 36;) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-') return NULL;
            i++;
            continue;
        }
        int hi = hexval(s[i]), lo = hexval(s[i + 1]);
        if (hi < 0 || lo < 0 || i + 1 == 8 || i + 1 == 13 || i + 1 == 18 || i + 1 == 23) return NULL;
        out[j++] = (uint8_t)(hi << 4 | lo);
        i += 2;
    }
    return PyBytes_FromStringAndSize((const char *)out, 16);
}

/* delta._rv_int: a canonical decimal below 2**63. */
static int rv_int(PyObject *rv, long long *out) {
    if (!PyUnicode_CheckExact(rv) || PyUnicode_KIND(rv) != PyUnicode_1BYTE_KIND) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(rv);
    if (n < 1 || n > RV_MAX_DIGITS) return 0;
    const Py_UCS1 *s = PyUnicode_1BYTE_DATA(rv);
    if (s[0] == '0' && n > 1) return 0;
    unsigned long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        if (v > (ULLONG_MAX - 9) / 10) return 0; /* past 2**63 anyway */
        v = v * 10 + (s[i] - '0');
    }
    if (v >= (1ULL << 63)) return 0;
    *out = (long long)v;
    return 1;
}

static int append_new(PyObject *list, PyObject *item) { /* steals item */
    if (item == NULL) return -1;
    int r = PyList_Append(list, item);
    Py_DECREF(item);
    return r;
}

/* key_ref / spec_hash_ref of delta._Columns: the index of a value met before, else the value (a key)
 * or [value] (a spec hash), now met. New reference, or NULL on error. */
static PyObject *key_ref(PyObject *key_index, PyObject *keys, PyObject *key) {
    PyObject *index = PyDict_GetItemWithError(key_index, key);
    if (index != NULL) return Py_NewRef(index);
    if (PyErr_Occurred()) return NULL;
    PyObject *next = PyLong_FromSsize_t(PyList_GET_SIZE(keys));
    if (next == NULL || PyDict_SetItem(key_index, key, next) < 0 || PyList_Append(keys, key) < 0) {
        Py_XDECREF(next);
        return NULL;
    }
    Py_DECREF(next);
    return Py_NewRef(key);
}

static PyObject *spec_hash_ref(PyObject *known, PyObject *value) {
    PyObject *index = PyDict_GetItemWithError(known, value);
    if (index != NULL) return Py_NewRef(index);
    if (PyErr_Occurred()) return NULL;
    PyObject *next = PyLong_FromSsize_t(PyDict_GET_SIZE(known));
    if (next == NULL || PyDict_SetItem(known, value, next) < 0) {
        Py_XDECREF(next);
        return NULL;
    }
    Py_DECREF(next);
    PyObject *list = PyList_New(1);
    if (list != NULL) PyList_SET_ITEM(list, 0, Py_NewRef(value));
    return list;
}

/* A lifecycle's start or end as its offset from the event time (None stays None); 0 if it does not
 * fit (Python decides). */
static int time_offset(long long ts, PyObject *t, PyObject **out) {
    if (t == Py_None) {
        *out = Py_NewRef(Py_None);
        return 1;
    }
    long long v, d;
    if (!as_i64(t, &v) || __builtin_sub_overflow(ts, v, &d)) return 0;
    *out = PyLong_FromLongLong(d);
    return *out != NULL ? 1 : -1;
}

typedef struct {
    PyObject *items[N_COLUMNS]; /* this row's value per column, or NULL (the row has none there) */
} row_values;

static void row_clear(row_values *r) {
    for (int i = 0; i < N_COLUMNS; i++) Py_CLEAR(r->items[i]);
}

/* One row: 1 taken (columns and state updated), 0 left to Python, -1 error. */
static int encode_row(PyObject *value, PyObject **cols, PyObject *key_index, PyObject *keys,
                      PyObject *bases, PyObject *spec_hashes, long long *prev_ts, long long *prev_rv) {
    if (!PyList_CheckExact(value)) return 0;
    Py_ssize_t len = PyList_GET_SIZE(value);
    if (len < 8) return 0;
    PyObject **v = ((PyListObject *)value)->ob_item;
    long long version, code, ts;
    if (!as_i64(v[0], &version) || version != 1 || !as_i64(v[1], &code) || code < 1 || code > 4 ||
        !as_i64(v[2], &ts) || !PyUnicode_CheckExact(v[3]) || (len == 8) != (code <= 2))
        return 0;
    long long ts_step;
    if (__builtin_sub_overflow(ts, *prev_ts, &ts_step)) return 0;
    PyObject *key = v[3], *uid = v[4], *rv = v[5], *obj = v[6], *sh = v[7];
    PyObject *index = PyDict_GetItemWithError(key_index, key); /* borrowed */
    if (index == NULL && PyErr_Occurred()) return -1;
    Py_ssize_t slot_of_key = -1;
    PyObject *slot = NULL, *base = NULL;
    if (index != NULL) {
        slot_of_key = PyLong_AsSsize_t(index);
        if (slot_of_key < 0) {
            PyErr_Clear();
            return 0;
        }
        slot = PyLong_FromSsize_t(slot_of_key * 3 + (code <= 2 ? 0 : code - 2));
        if (slot == NULL) return -1;
        base = PyDict_GetItemWithError(bases, slot); /* borrowed */
        if (base == NULL && PyErr_Occurred()) goto error;
        if (base != NULL && (!PyList_CheckExact(base) || PyList_GET_SIZE(base) < 8)) goto python;
    }
    row_values r = {{NULL}};
    long flags = 0;
    PyObject **b = base != NULL ? ((PyListObject *)base)->ob_item : NULL;
    int same;
    /* uid */
    same = b != NULL ? same_scalar(b[4], uid) : 0;
    if (same < 0) goto python_row;
    if (same) {
        flags |= F_UID_SAME;
    } else {
        PyObject *bin = uid_bytes(uid);
        if (bin == NULL && PyErr_Occurred()) goto error_row;
        if (bin != NULL) {
            flags |= F_UID_BIN;
            r.items[C_UID] = bin;
        } else {
            r.items[C_UID] = Py_NewRef(uid);
        }
    }
    /* rv */
    long long rv_value;
    int rv_is_int = rv_int(rv, &rv_value);
    if (rv_is_int) {
        flags |= F_RV_INT;
        r.items[C_RV] = PyLong_FromLongLong(rv_value - *prev_rv); /* both in [0, 2**63) */
        if (r.items[C_RV] == NULL) goto error_row;
    } else {
        r.items[C_RV] = Py_NewRef(rv);
    }
    /* spec hash */
    same = b != NULL ? same_scalar(b[7], sh) : 0;
    if (same < 0) goto python_row;
    if (same) flags |= F_SH_SAME;
    else r.items[C_SH] = Py_NewRef(sh);
    /* obj: the same as the base's, a patch of it (the patch rebuilds it strictly: every part the
     * patch leaves out is strictly the same), or whole */
    same = 0;
    if (b != NULL) {
        same = same3(b[6], obj);
        if (same < 0) goto python_row;
        if (!same && Py_IS_TYPE(b[6], Py_TYPE(obj)) && (PyList_CheckExact(obj) || PyDict_CheckExact(obj))) {
            PyObject *patch = diff(b[6], obj, 0);
            if (patch == NULL) goto error_row;
            if (patch == NOT_MINE) goto python_row;
            if (PyLong_AsLong(PyList_GET_ITEM(patch, 0)) != REPLACE) {
                flags |= F_OBJ_PATCH;
                r.items[C_OBJ] = patch;
            } else {
                Py_DECREF(patch);
            }
        }
    }
    if (same) flags |= F_OBJ_SAME;
    else if (r.items[C_OBJ] == NULL) r.items[C_OBJ] = Py_NewRef(obj);
    /* the event's own fields */
    if (len > 8) {
        if (code == 3) {
            if (len != 12) goto python_row;
            PyObject *owner = v[8], *pod_hash = v[9];
            if (!(owner == Py_None || PyUnicode_CheckExact(owner)) || !PyLong_CheckExact(pod_hash))
                goto python_row;
            int ok = time_offset(ts, v[10], &r.items[C_ST]);
            if (ok == 1) ok = time_offset(ts, v[11], &r.items[C_EN]);
            if (ok < 0) goto error_row;
            if (ok == 0) goto python_row;
            flags |= F_EXT_COLUMNS;
        } else {
            PyObject *ext = PyList_GetSlice(value, 8, len);
            if (ext == NULL) goto error_row;
            if (b != NULL) {
                PyObject *base_ext = PyList_GetSlice(base, 8, PyList_GET_SIZE(base));
                if (base_ext == NULL) {
                    Py_DECREF(ext);
                    goto error_row;
                }
                int eq = strict_equal(base_ext, ext, 0);
                Py_DECREF(base_ext);
                if (!eq) { /* same type (lists): patched or loosely equal, Python's */
                    Py_DECREF(ext);
                    goto python_row;
                }
                flags |= F_EXT_SAME;
                Py_DECREF(ext);
            } else {
                r.items[C_EXT] = ext;
            }
        }
    }
    /* Decided: the keys are met (the row's own, then its owner's), the row written. */
    if (index == NULL) {
        slot_of_key = PyList_GET_SIZE(keys);
        PyObject *ref = key_ref(key_index, keys, key);
        if (ref == NULL) goto error_row;
        r.items[C_KEY] = ref; /* the key itself */
        slot = PyLong_FromSsize_t(slot_of_key * 3 + (code <= 2 ? 0 : code - 2));
        if (slot == NULL) goto error_row;
    } else {
        r.items[C_KEY] = Py_NewRef(index);
    }
    if (flags & F_EXT_COLUMNS) {
        r.items[C_OWN] = v[8] == Py_None ? Py_NewRef(Py_None) : key_ref(key_index, keys, v[8]);
        if (r.items[C_OWN] == NULL) goto error_row;
        r.items[C_PSH] = spec_hash_ref(spec_hashes, v[9]);
        if (r.items[C_PSH] == NULL) goto error_row;
    }
    r.items[C_TS] = PyLong_FromLongLong(ts_step);
    r.items[C_OP] = PyLong_FromLong(code | flags << 3);
    if (r.items[C_TS] == NULL || r.items[C_OP] == NULL) goto error_row;
    for (int i = 0; i < N_COLUMNS; i++) {
        if (r.items[i] != NULL && PyList_Append(cols[i], r.items[i]) < 0) goto error_row;
    }
    /* the row rebuilds to a value strictly equal to this one: it is the next base */
    if (PyDict_SetItem(bases, slot, value) < 0) goto error_row;
    row_clear(&r);
    Py_DECREF(slot);
    *prev_ts = ts;
    if (rv_is_int) *prev_rv = rv_value;
    return 1;
python_row:
    row_clear(&r);
python:
    Py_XDECREF(slot);
    return 0;
error_row:
    row_clear(&r);
error:
    Py_XDECREF(slot);
    return -1;
}

static PyObject *encode_rows(PyObject *self, PyObject *args) {
    PyObject *values, *cols_tuple, *key_index, *keys, *bases, *spec_hashes;
    Py_ssize_t start;
    long long prev_ts, prev_rv;
    if (!PyArg_ParseTuple(args, "O!nO!O!O!O!O!LL", &PyList_Type, &values, &start, &PyTuple_Type,
                          &cols_tuple, &PyDict_Type, &key_index, &PyList_Type, &keys, &PyDict_Type,
                          &bases, &PyDict_Type, &spec_hashes, &prev_ts, &prev_rv))
        return NULL;
    if (PyTuple_GET_SIZE(cols_tuple) != N_COLUMNS) {
        PyErr_SetString(PyExc_ValueError, "encode_rows: wrong number of columns");
        return NULL;
    }
    PyObject *cols[N_COLUMNS];
    for (int i = 0; i < N_COLUMNS; i++) {
        cols[i] = PyTuple_GET_ITEM(cols_tuple, i);
        if (!PyList_CheckExact(cols[i])) {
            PyErr_SetString(PyExc_TypeError, "encode_rows: a column is not a list");
            return NULL;
        }
    }
    Py_ssize_t i = start < 0 ? 0 : start;
    for (; i < PyList_GET_SIZE(values); i++) {
        int r = encode_row(PyList_GET_ITEM(values, i), cols, key_index, keys, bases, spec_hashes,
                           &prev_ts, &prev_rv);
        if (r < 0) return NULL;
        if (r == 0) break;
    }
    return Py_BuildValue("nLL", i, prev_ts, prev_rv);
}


/* ---- canonical msgpack: bytes that msgpack-python unpacks and packs back to exactly themselves ---- */
#define CANON_MAX_DEPTH 512 /* deeper values are left to Python's own check (msgpack stops at 1024) */

typedef struct {
    const uint8_t *s;
    uint32_t n;
} span;

static int span_order(const void *x, const void *y) {
    const span *a = x, *b = y;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return memcmp(a->s, b->s, a->n);
}

static uint64_t be_n(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

static const uint8_t *canonical_value(const uint8_t *p, const uint8_t *end, int depth, span *key);

/* Whether a length header of this tag is the smallest msgpack-python writes for n (the fix forms are
 * checked by the caller). */
static int smallest_len(uint8_t tag, uint64_t n) {
    switch (tag) {
        case 0xc4: return n < 256;                 /* bin 8 */
        case 0xd9: return n >= 32 && n < 256;      /* str 8 */
        case 0xc5: case 0xda: return n >= 256 && n < 65536;
        case 0xdc: case 0xde: return n >= 16 && n < 65536; /* array 16, map 16 */
        default: return n >= 65536;                /* bin, str, array, map 32 */
    }
}

/* Map keys must be text without repeats (a repeated key collapses in a dict; keys of other types can
 * be equal in Python with other bytes: 1, 1.0, True). */
static const uint8_t *canonical_map(const uint8_t *p, const uint8_t *end, uint64_t n, int depth) {
    span small[16];
    if (n > (uint64_t)(end - p) / 2) return NULL; /* each pair takes 2 bytes at least */
    span *keys = n <= 16 ? small : PyMem_Malloc(n * sizeof(span));
    if (keys == NULL) return NULL;
    for (uint64_t i = 0; i < n && p != NULL; i++) {
        keys[i].s = NULL;
        p = canonical_value(p, end, depth + 1, &keys[i]);
        if (p != NULL && keys[i].s == NULL) p = NULL; /* not text */
        if (p != NULL) p = canonical_value(p, end, depth + 1, NULL);
    }
    if (p != NULL && n > 1) {
        if (n <= 16) {
            for (uint64_t i = 0; i < n && p != NULL; i++)
                for (uint64_t j = i + 1; j < n; j++)
                    if (keys[i].n == keys[j].n && memcmp(keys[i].s, keys[j].s, keys[i].n) == 0) p = NULL;
        } else {
            qsort(keys, n, sizeof(span), span_order);
            for (uint64_t i = 1; i < n && p != NULL; i++)
                if (span_order(&keys[i - 1], &keys[i]) == 0) p = NULL;
        }
    }
    if (keys != small) PyMem_Free(keys);
    return p;
}

/* The end of the canonical value at p, or NULL. `key`, if given, receives the bytes of a text value. */
static const uint8_t *canonical_value(const uint8_t *p, const uint8_t *end, int depth, span *key) {
    if (p >= end || depth > CANON_MAX_DEPTH) return NULL;
    uint8_t tag = *p++;
    uint64_t n;
    if (tag <= 0x7f || tag >= 0xe0 || tag == 0xc0 || tag == 0xc2 || tag == 0xc3) return p;
    if ((tag & 0xe0) == 0xa0) { n = tag & 0x1f; goto text; }
    if ((tag & 0xf0) == 0x90) { n = tag & 0x0f; goto array; }
    if ((tag & 0xf0) == 0x80) return canonical_map(p, end, tag & 0x0f, depth);
    static const int8_t widths[32] = {
        /* c4 c5 c6 */ [4] = 1, [5] = 2, [6] = 4, /* cb: float 64 */ [11] = 8,
        /* cc-cf */ [12] = 1, [13] = 2, [14] = 4, [15] = 8, /* d0-d3 */ [16] = 1, [17] = 2, [18] = 4, [19] = 8,
        /* d9-db */ [25] = 1, [26] = 2, [27] = 4, /* dc dd */ [28] = 2, [29] = 4, /* de df */ [30] = 2, [31] = 4,
    };
    int w = tag >= 0xc0 ? widths[tag - 0xc0] : 0;
    if (w == 0 || end - p < w) return NULL; /* ext, float 32, unused: not what Python packs */
    n = be_n(p, w);
    p += w;
    switch (tag) {
        case 0xcb: { /* NaN bits may not survive a trip through Python: left to Python's check */
            uint64_t exponent = n >> 52 & 0x7ff, mantissa = n & ((1ULL << 52) - 1);
            return exponent == 0x7ff && mantissa != 0 ? NULL : p;
        }
        case 0xcc: return n >= 0x80 ? p : NULL;
        case 0xcd: return n >= 0x100 ? p : NULL;
        case 0xce: return n >= 0x10000 ? p : NULL;
        case 0xcf: return n >= 0x100000000ULL ? p : NULL;
        case 0xd0: return (int8_t)n < -32 ? p : NULL;
        case 0xd1: return (int16_t)n < -128 ? p : NULL;
        case 0xd2: return (int32_t)n < -32768 ? p : NULL;
        case 0xd3: return (int64_t)n < -2147483648LL ? p : NULL;
        case 0xc4: case 0xc5: case 0xc6:
            if (!smallest_len(tag, n) || (uint64_t)(end - p) < n) return NULL;
            return p + n;
        case 0xd9: case 0xda: case 0xdb:
            if (!smallest_len(tag, n)) return NULL;
            goto text;
        case 0xdc: case 0xdd:
            if (!smallest_len(tag, n)) return NULL;
            goto array;
        default: /* 0xde, 0xdf */
            if (!smallest_len(tag, n)) return NULL;
            return canonical_map(p, end, n, depth);
    }
text: /* its UTF-8 is checked by the unpacking that follows (which fails on invalid text) */
    if ((uint64_t)(end - p) < n) return NULL;
    if (key != NULL) {
        key->s = p;
        key->n = (uint32_t)n;
    }
    return p + n;
array:
    for (uint64_t i = 0; i < n && p != NULL; i++) p = canonical_value(p, end, depth + 1, NULL);
    return p;
}

static PyObject *canonical(PyObject *self, PyObject *args) {
    Py_buffer blob;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &blob, &count)) return NULL;
    const uint8_t *p = blob.buf, *end = p + blob.len;
    for (Py_ssize_t i = 0; i < count && p != NULL; i++) p = canonical_value(p, end, 0, NULL);
    int ok = p == end;
    PyBuffer_Release(&blob);
    if (PyErr_Occurred()) return NULL;
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"encode_rows", encode_rows, METH_VARARGS,
     "encode_rows(values, start, columns, key_index, keys, bases, spec_hashes, prev_ts, prev_rv) -> "
     "(stop, prev_ts, prev_rv): rows values[start:stop] appended; values[stop] is Python's to encode."},
    {"canonical", canonical, METH_VARARGS,
     "canonical(blob, count) -> bool: blob is exactly count msgpack values, each in the form msgpack-python "
     "packs what it unpacks (smallest headers, double floats, text map keys without repeats, no ext)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_deltarows", NULL, -1, methods};

PyMODINIT_FUNC PyInit__deltarows(void) {
    NOT_MINE = PyLong_FromLong(-1);
    if (NOT_MINE == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "DELTA_ROWS", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
