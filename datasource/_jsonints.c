/*
 * dataflow_kafka.datasource._jsonints: integer fields of flat JSON objects, a whole column at once.
 *
 * The source takes each record's event time (and, for the first operator's rows, a few more
 * fields) from its JSON value (datasource/kafka_read.py, event_times_and_fields). pyarrow.json
 * parses every field of every value into a table first; here the values of an Arrow binary
 * column are scanned once and only the named top-level fields are read, as int64.
 *
 * The scan answers only where its answer is certainly pyarrow.json's: a value that is one flat
 * JSON object on one line, in ASCII, each named field present at most once with an integer (or
 * null) that fits int64, every other member a string, number, true, false or null. Anything else
 * (a nested object or array, a non-ASCII byte, a line break, an escaped key, a float in a named
 * field, malformed JSON) makes the whole call return None, and the caller parses the column as
 * before: the scan is a fast path, never a second parser with its own answers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const unsigned char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

static int is_hex(unsigned char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* A JSON string at c->p (the opening quote); its content's bounds in *s, *len; *escaped when it
 * holds a backslash. 0 when it is not a valid JSON string in ASCII. */
static int scan_string(cursor *c, const unsigned char **s, Py_ssize_t *len, int *escaped) {
    if (c->p >= c->end || *c->p != '"')
        return 0;
    const unsigned char *start = ++c->p;
    *escaped = 0;
    while (c->p < c->end) {
        unsigned char ch = *c->p;
        if (ch == '"') {
            *s = start;
            *len = c->p - start;
            c->p++;
            return 1;
        }
        if (ch < 0x20 || ch >= 0x80)
            return 0;
        if (ch == '\\') {
            *escaped = 1;
            if (++c->p >= c->end)
                return 0;
            ch = *c->p;
            if (ch == 'u') {
                if (c->end - c->p < 5 || !is_hex(c->p[1]) || !is_hex(c->p[2]) || !is_hex(c->p[3]) || !is_hex(c->p[4]))
                    return 0;
                c->p += 4;
            } else if (!strchr("\"\\/bfnrt", ch) || ch == 0) {
                return 0;
            }
        }
        c->p++;
    }
    return 0;
}

/* A JSON number at c->p; *is_int when it has no fraction and no exponent. 0 when malformed. */
static int scan_number(cursor *c, int *is_int) {
    const unsigned char *p = c->p;
    *is_int = 1;
    if (p < c->end && *p == '-')
        p++;
    if (p >= c->end)
        return 0;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < c->end && *p >= '0' && *p <= '9')
            p++;
    } else {
        return 0;
    }
    if (p < c->end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= c->end || *p < '0' || *p > '9')
            return 0;
        while (p < c->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < c->end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < c->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= c->end || *p < '0' || *p > '9')
            return 0;
        while (p < c->end && *p >= '0' && *p <= '9')
            p++;
    }
    c->p = p;
    return 1;
}

/* The integer of a JSON number scanned from s to e (no fraction, no exponent) in *out; 0 when it
 * does not fit int64. */
static int to_int64(const unsigned char *s, const unsigned char *e, int64_t *out) {
    int neg = *s == '-';
    if (neg)
        s++;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; s < e; s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (limit - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

static int literal(cursor *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

/* One value: the named fields' integers into values[k][row], valid[k][row]. 0: not certain. */
static int scan_object(cursor *c, Py_ssize_t row, Py_ssize_t nnames, const char **names, const Py_ssize_t *lens,
                       int64_t **values, uint8_t **valid, uint8_t *seen) {
    memset(seen, 0, (size_t)nnames);
    skip_ws(c);
    if (c->p >= c->end || *c->p != '{')
        return 0;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
    } else {
        for (;;) {
            const unsigned char *key;
            Py_ssize_t klen;
            int escaped;
            if (!scan_string(c, &key, &klen, &escaped) || escaped)
                return 0;
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':')
                return 0;
            c->p++;
            skip_ws(c);
            Py_ssize_t k = -1;
            for (Py_ssize_t i = 0; i < nnames; i++)
                if (lens[i] == klen && memcmp(names[i], key, (size_t)klen) == 0) {
                    k = i;
                    break;
                }
            if (k >= 0 && seen[k])
                return 0;                       /* a named field twice */
            if (c->p >= c->end)
                return 0;
            unsigned char ch = *c->p;
            if (ch == '"') {
                const unsigned char *s;
                Py_ssize_t slen;
                if (k >= 0 || !scan_string(c, &s, &slen, &escaped))
                    return 0;
            } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
                const unsigned char *s = c->p;
                int is_int;
                if (!scan_number(c, &is_int))
                    return 0;
                if (k >= 0) {
                    if (!is_int || !to_int64(s, c->p, &values[k][row]))
                        return 0;
                    valid[k][row] = 1;
                }
            } else if (ch == 'n') {
                if (!literal(c, "null"))
                    return 0;
            } else if (ch == 't' || ch == 'f') {
                if (k >= 0 || !(literal(c, "true") || literal(c, "false")))
                    return 0;
            } else {
                return 0;                       /* a nested object or array, or not JSON */
            }
            if (k >= 0)
                seen[k] = 1;
            skip_ws(c);
            if (c->p < c->end && *c->p == ',') {
                c->p++;
                skip_ws(c);
                continue;
            }
            if (c->p < c->end && *c->p == '}') {
                c->p++;
                break;
            }
            return 0;
        }
    }
    skip_ws(c);
    return c->p == c->end;
}

PyDoc_STRVAR(int_fields_doc,
    "int_fields(data, offsets, offset, n, names) -> [(values, valid), ...] or None\n\n"
    "The int64 fields names (bytes) of the n JSON values of an Arrow binary column without nulls\n"
    "(data: its data buffer, offsets: its int32 offsets buffer, offset: the array's offset into\n"
    "them): per name the values (a bytearray of n int64, 0 where not valid) and validity (n bytes, 1\n"
    "where the field is present and not null). None where any value is not certainly read as\n"
    "pyarrow.json would read it (the module's docstring).");

static PyObject *int_fields(PyObject *self, PyObject *args) {
    Py_buffer data, offs;
    Py_ssize_t offset, n;
    PyObject *names_obj;
    if (!PyArg_ParseTuple(args, "y*y*nnO!", &data, &offs, &offset, &n, &PyTuple_Type, &names_obj))
        return NULL;
    PyObject *result = NULL, *out = NULL;
    Py_ssize_t nnames = PyTuple_GET_SIZE(names_obj);
    const char **names = PyMem_Calloc((size_t)(nnames ? nnames : 1), sizeof(*names));
    Py_ssize_t *lens = PyMem_Calloc((size_t)(nnames ? nnames : 1), sizeof(*lens));
    int64_t **values = PyMem_Calloc((size_t)(nnames ? nnames : 1), sizeof(*values));
    uint8_t **valid = PyMem_Calloc((size_t)(nnames ? nnames : 1), sizeof(*valid));
    uint8_t *seen = PyMem_Calloc((size_t)(nnames ? nnames : 1), 1);
    if (!names || !lens || !values || !valid || !seen) {
        PyErr_NoMemory();
        goto done;
    }
    if (offset < 0 || n < 0 || (offset + n + 1) * 4 > offs.len) {
        PyErr_SetString(PyExc_ValueError, "int_fields: offsets buffer too short for offset + n");
        goto done;
    }
    for (Py_ssize_t i = 0; i < nnames; i++) {
        PyObject *name = PyTuple_GET_ITEM(names_obj, i);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "int_fields: names must be bytes");
            goto done;
        }
        names[i] = PyBytes_AS_STRING(name);
        lens[i] = PyBytes_GET_SIZE(name);
    }
    out = PyList_New(nnames);
    if (!out)
        goto done;
    for (Py_ssize_t i = 0; i < nnames; i++) {
        PyObject *v = PyByteArray_FromStringAndSize(NULL, 8 * n), *m = PyByteArray_FromStringAndSize(NULL, n);
        if (!v || !m) {
            Py_XDECREF(v);
            Py_XDECREF(m);
            goto done;
        }
        values[i] = (int64_t *)PyByteArray_AS_STRING(v);
        valid[i] = (uint8_t *)PyByteArray_AS_STRING(m);
        memset(values[i], 0, (size_t)(8 * n));
        memset(valid[i], 0, (size_t)n);
        PyList_SET_ITEM(out, i, Py_BuildValue("(NN)", v, m));
    }
    const int32_t *o = (const int32_t *)offs.buf + offset;
    int certain = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t row = 0; row < n && certain; row++) {
        if (o[row] < 0 || o[row + 1] < o[row] || o[row + 1] > data.len) {
            certain = 0;
            break;
        }
        cursor c = {(const unsigned char *)data.buf + o[row], (const unsigned char *)data.buf + o[row + 1]};
        certain = scan_object(&c, row, nnames, names, lens, values, valid, seen);
    }
    Py_END_ALLOW_THREADS
    if (certain) {
        result = out;
        out = NULL;
    } else {
        result = Py_None;
        Py_INCREF(result);
    }
done:
    Py_XDECREF(out);
    PyMem_Free(names);
    PyMem_Free(lens);
    PyMem_Free(values);
    PyMem_Free(valid);
    PyMem_Free(seen);
    PyBuffer_Release(&data);
    PyBuffer_Release(&offs);
    return result;
}

static PyMethodDef methods[] = {
    {"int_fields", int_fields, METH_VARARGS, int_fields_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jsonints",
    "Integer fields of flat JSON objects, a whole Arrow binary column at once (a fast path of "
    "pyarrow.json's answer).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__jsonints(void) {
    return PyModule_Create(&module);
}
