/*
 * dataflow_kafka.datasource._rdcolumns: one poll of a confluent_kafka.Consumer into columns.
 *
 * The source's read (datasource/kafka_read.py, fetch_range(..., columns=True)) wants a poll's
 * records as Arrow buffers: offsets, (type, ms) timestamps, keys and values (Arrow binary
 * layout: validity bitmap, int32 offsets, data). confluent_kafka's consume() makes a Python
 * Message per record and its key, value and timestamp objects, which the reader then turns into
 * columns (docs/source.md, "The read in C"); here librdkafka's messages are copied into the
 * buffers directly and no Python object per record is made.
 *
 * The consumer stays confluent_kafka's: configuration, callbacks, assignment and errors are its
 * own. This module takes the librdkafka handle from the Consumer object and polls the same queue
 * confluent_kafka's consume() polls (rd_kafka_queue_get_consumer), with the same per-thread call
 * state that confluent_kafka's callbacks (error_cb, logger, oauth_cb) expect to find. Both depend
 * on the first fields of confluent_kafka's C Handle, declared below as in confluent_kafka 2.x's
 * confluent_kafka.h; kafka_read binds this module only to the confluent_kafka versions it was
 * checked against, and every call checks the handle is a live consumer (rd_kafka_type) before it
 * polls. librdkafka's functions are looked up in the copy confluent_kafka loaded (bind(path)).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

/* librdkafka's public ABI, the part used here (rdkafka.h: rd_kafka_message_t is public). */
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;
typedef struct {
    int err;                 /* rd_kafka_resp_err_t */
    void *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rd_kafka_message_t;

#define RD_KAFKA_CONSUMER 1

static struct {
    int (*type)(const rd_kafka_t *);
    rd_kafka_queue_t *(*queue_get_consumer)(rd_kafka_t *);
    void (*queue_destroy)(rd_kafka_queue_t *);
    Py_ssize_t (*consume_batch_queue)(rd_kafka_queue_t *, int, rd_kafka_message_t **, size_t);
    void (*message_destroy)(rd_kafka_message_t *);
    int64_t (*message_timestamp)(const rd_kafka_message_t *, int *);
    int (*message_headers)(const rd_kafka_message_t *, rd_kafka_headers_t **);
    int (*header_get_all)(const rd_kafka_headers_t *, size_t, const char **, const void **, size_t *);
    const char *(*err2str)(int);
} rk;

static PyTypeObject *consumer_type = NULL;

/* The first fields of confluent_kafka's Handle (Producer and Consumer objects) and its CallState. */
typedef struct {
    PyThreadState *thread_state;
    int crashed;
} cfl_call_state;

typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
    PyObject *error_cb;
    PyObject *throttle_cb;
    PyObject *stats_cb;
    int initiated;
    Py_tss_t tlskey;
    int type;                /* rd_kafka_type_t */
} cfl_handle;

#define LOOKUP(field, name)                                                            \
    do {                                                                               \
        *(void **)(&rk.field) = dlsym(lib, name);                                      \
        if (!rk.field) {                                                               \
            PyErr_Format(PyExc_ImportError, "librdkafka at %s has no %s", path, name); \
            return NULL;                                                               \
        }                                                                              \
    } while (0)

PyDoc_STRVAR(bind_doc, "bind(librdkafka_path, consumer_type): look librdkafka's functions up in the "
             "copy at librdkafka_path (the one confluent_kafka loaded) and remember confluent_kafka's "
             "Consumer type.");

static PyObject *bind(PyObject *self, PyObject *args) {
    const char *path;
    PyObject *type;
    if (!PyArg_ParseTuple(args, "sO!", &path, &PyType_Type, &type))
        return NULL;
    if (((PyTypeObject *)type)->tp_basicsize < (Py_ssize_t)sizeof(cfl_handle)) {
        PyErr_SetString(PyExc_ImportError, "confluent_kafka's Consumer is smaller than the handle this module reads");
        return NULL;
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        PyErr_Format(PyExc_ImportError, "cannot open librdkafka at %s: %s", path, dlerror());
        return NULL;
    }
    LOOKUP(type, "rd_kafka_type");
    LOOKUP(queue_get_consumer, "rd_kafka_queue_get_consumer");
    LOOKUP(queue_destroy, "rd_kafka_queue_destroy");
    LOOKUP(consume_batch_queue, "rd_kafka_consume_batch_queue");
    LOOKUP(message_destroy, "rd_kafka_message_destroy");
    LOOKUP(message_timestamp, "rd_kafka_message_timestamp");
    LOOKUP(message_headers, "rd_kafka_message_headers");
    LOOKUP(header_get_all, "rd_kafka_header_get_all");
    LOOKUP(err2str, "rd_kafka_err2str");
    Py_XDECREF(consumer_type);
    Py_INCREF(type);
    consumer_type = (PyTypeObject *)type;
    Py_RETURN_NONE;
}

static void destroy_all(rd_kafka_message_t **msgs, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        rk.message_destroy(msgs[i]);
}

/* A bytes object of n bytes, not initialised; NULL with an exception set on failure. */
static PyObject *raw_bytes(Py_ssize_t n) {
    return PyBytes_FromStringAndSize(NULL, n);
}

/* Keys or values of the kept messages as Arrow binary buffers: (data, int32 offsets, validity
 * bitmap or None, null count). */
static PyObject *binary_column(rd_kafka_message_t **kept, Py_ssize_t n, int keys) {
    Py_ssize_t total = 0, nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const void *p = keys ? kept[i]->key : kept[i]->payload;
        if (p)
            total += (Py_ssize_t)(keys ? kept[i]->key_len : kept[i]->len);
        else
            nulls++;
    }
    if (total > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "a poll of %zd records holds %zd bytes of %s, more than an Arrow "
                     "binary column takes (2 GiB)", n, total, keys ? "keys" : "values");
        return NULL;
    }
    PyObject *data = raw_bytes(total), *offs = raw_bytes(4 * (n + 1)), *valid = NULL;
    if (!data || !offs)
        goto fail;
    if (nulls) {
        valid = raw_bytes((n + 7) / 8);
        if (!valid)
            goto fail;
        memset(PyBytes_AS_STRING(valid), 0, (n + 7) / 8);
    } else {
        valid = Py_None;
        Py_INCREF(valid);
    }
    char *d = PyBytes_AS_STRING(data);
    int32_t *o = (int32_t *)PyBytes_AS_STRING(offs);
    uint8_t *v = nulls ? (uint8_t *)PyBytes_AS_STRING(valid) : NULL;
    int32_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const void *p = keys ? kept[i]->key : kept[i]->payload;
        o[i] = at;
        if (p) {
            size_t len = keys ? kept[i]->key_len : kept[i]->len;
            memcpy(d + at, p, len);
            at += (int32_t)len;
            if (v)
                v[i >> 3] |= (uint8_t)(1u << (i & 7));
        }
    }
    o[n] = at;
    return Py_BuildValue("(NNNn)", data, offs, valid, nulls);
fail:
    Py_XDECREF(data);
    Py_XDECREF(offs);
    Py_XDECREF(valid);
    return NULL;
}

/* [(row, [(name, value or None), ...]), ...] for the kept messages that carry headers. */
static PyObject *headers_of(rd_kafka_message_t **kept, Py_ssize_t n) {
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        rd_kafka_headers_t *hdrs = NULL;
        if (rk.message_headers(kept[i], &hdrs) != 0 || !hdrs)
            continue;
        PyObject *list = PyList_New(0);
        if (!list)
            goto fail;
        const char *name;
        const void *value;
        size_t size;
        for (size_t h = 0; rk.header_get_all(hdrs, h, &name, &value, &size) == 0; h++) {
            PyObject *pair = value ? Py_BuildValue("(sy#)", name, (const char *)value, (Py_ssize_t)size)
                                   : Py_BuildValue("(sO)", name, Py_None);
            if (!pair || PyList_Append(list, pair) < 0) {
                Py_XDECREF(pair);
                Py_DECREF(list);
                goto fail;
            }
            Py_DECREF(pair);
        }
        PyObject *row = Py_BuildValue("(nN)", i, list);
        if (!row || PyList_Append(out, row) < 0) {
            Py_XDECREF(row);
            goto fail;
        }
        Py_DECREF(row);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

PyDoc_STRVAR(consume_doc,
    "consume(consumer, max_messages, timeout_ms, end) -> (polled, first, errors, columns)\n\n"
    "One poll of up to max_messages from consumer's queue (confluent_kafka's consume()). polled: the\n"
    "number of messages and events the poll returned; first: the offset of the first record (or\n"
    "None); errors: [(code, reason)] of the error events; columns of the records before offset end:\n"
    "(n, offsets int64, timestamps (type, ms) int64 pairs, keys, values, headers), keys and values\n"
    "each (data, int32 offsets, validity bitmap or None, null count), headers [(row, [(name, value)])].");

static PyObject *consume(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t max;
    int timeout_ms;
    long long end;
    if (!PyArg_ParseTuple(args, "OniL", &obj, &max, &timeout_ms, &end))
        return NULL;
    if (!consumer_type) {
        PyErr_SetString(PyExc_RuntimeError, "_rdcolumns.bind() was not called");
        return NULL;
    }
    if (!PyObject_TypeCheck(obj, consumer_type)) {
        PyErr_Format(PyExc_TypeError, "not a confluent_kafka.Consumer: %R", Py_TYPE(obj));
        return NULL;
    }
    cfl_handle *h = (cfl_handle *)obj;
    if (!h->rk) {
        PyErr_SetString(PyExc_RuntimeError, "Consumer closed");
        return NULL;
    }
    if (rk.type(h->rk) != RD_KAFKA_CONSUMER || h->type != RD_KAFKA_CONSUMER) {
        PyErr_SetString(PyExc_SystemError, "confluent_kafka's Consumer is not laid out as _rdcolumns expects");
        return NULL;
    }
    if (max < 1)
        max = 1;
    rd_kafka_message_t **msgs = PyMem_Malloc(sizeof(*msgs) * (size_t)max);
    if (!msgs)
        return PyErr_NoMemory();
    rd_kafka_queue_t *q = rk.queue_get_consumer(h->rk);
    if (!q) {
        PyMem_Free(msgs);
        PyErr_SetString(PyExc_RuntimeError, "the consumer has no consumer queue");
        return NULL;
    }
    /* confluent_kafka's CallState_begin / CallState_end: its callbacks, served inside the poll,
     * take the GIL back through the state stored under the handle's thread-local key. */
    cfl_call_state cs = {NULL, 0};
    cs.thread_state = PyEval_SaveThread();
    PyThread_tss_set(&h->tlskey, &cs);
    Py_ssize_t got = rk.consume_batch_queue(q, timeout_ms, msgs, (size_t)max);
    PyThread_tss_set(&h->tlskey, NULL);
    PyEval_RestoreThread(cs.thread_state);
    rk.queue_destroy(q);
    if (got < 0)
        got = 0;
    if (cs.crashed || PyErr_CheckSignals() == -1) {   /* a callback raised, or Ctrl-C */
        destroy_all(msgs, got);
        PyMem_Free(msgs);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "a confluent_kafka callback failed during the poll");
        return NULL;
    }

    PyObject *errors = PyList_New(0), *first = NULL, *result = NULL;
    rd_kafka_message_t **kept = PyMem_Malloc(sizeof(*kept) * (size_t)(got ? got : 1));
    Py_ssize_t n = 0;
    if (!errors || !kept)
        goto done;
    for (Py_ssize_t i = 0; i < got; i++) {
        rd_kafka_message_t *m = msgs[i];
        if (m->err) {
            PyObject *reason = m->payload ? PyUnicode_DecodeUTF8((const char *)m->payload, (Py_ssize_t)m->len, "replace")
                                          : PyUnicode_FromString(rk.err2str(m->err));
            PyObject *e = reason ? Py_BuildValue("(iN)", m->err, reason) : NULL;
            if (!e || PyList_Append(errors, e) < 0) {
                Py_XDECREF(e);
                goto done;
            }
            Py_DECREF(e);
            continue;
        }
        if (!first && !(first = PyLong_FromLongLong(m->offset)))
            goto done;
        if (m->offset < end)
            kept[n++] = m;
    }
    PyObject *offsets = raw_bytes(8 * n), *stamps = raw_bytes(16 * n);
    if (!offsets || !stamps) {
        Py_XDECREF(offsets);
        Py_XDECREF(stamps);
        goto done;
    }
    int64_t *off = (int64_t *)PyBytes_AS_STRING(offsets), *ts = (int64_t *)PyBytes_AS_STRING(stamps);
    for (Py_ssize_t i = 0; i < n; i++) {
        int tstype = 0;
        off[i] = kept[i]->offset;
        ts[2 * i + 1] = rk.message_timestamp(kept[i], &tstype);
        ts[2 * i] = tstype;
    }
    PyObject *keys = binary_column(kept, n, 1);
    PyObject *values = keys ? binary_column(kept, n, 0) : NULL;
    PyObject *headers = values ? headers_of(kept, n) : NULL;
    if (!headers) {
        Py_DECREF(offsets);
        Py_DECREF(stamps);
        Py_XDECREF(keys);
        Py_XDECREF(values);
        goto done;
    }
    result = Py_BuildValue("(nOO(nNNNNN))", got, first ? first : Py_None, errors, n, offsets, stamps, keys,
                           values, headers);
done:
    destroy_all(msgs, got);
    PyMem_Free(msgs);
    PyMem_Free(kept);
    Py_XDECREF(errors);
    Py_XDECREF(first);
    if (!result && !PyErr_Occurred())
        PyErr_NoMemory();
    return result;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS, bind_doc},
    {"consume", consume, METH_VARARGS, consume_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rdcolumns",
    "One poll of a confluent_kafka.Consumer into Arrow buffers, without a Python object per record.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__rdcolumns(void) {
    return PyModule_Create(&module);
}
