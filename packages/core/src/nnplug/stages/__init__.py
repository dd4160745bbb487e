"""The stages a model goes through, one module each, in this order (``nnplug.pipeline`` runs
them; a stage imports only stages before it):

    loader     read      path, bytes or ModelProto -> Model (checked, shapes inferred)
    validate   check     every node, before any backend sees it
    precision  widen     float16 nodes no backend runs natively -> float32 between casts
    expand     expand    nodes no backend claims whose op is a function -> its body
    folding    fold      constant subgraphs run once -> constants; cse: repeated nodes -> one
    planner    place     a backend, custom op or core op for each node; measure: timed choice
    compiler   compile   each partition built for its Target -> the Plan
    executor   run       the Plan's steps over the feeds

What they share (the Model, graph utilities, shape inference, the Plan) lives beside this
package, in ``nnplug.graph``, ``nnplug.inference``, ``nnplug.from_onnx`` and ``nnplug.plan``.
"""
