package cudabridge

// The kernels of model.cu in Go, one loop iteration per GPU thread, over the
// same flat buffers. The CPU backend runs a batch through them; the tests'
// fake driver runs them when the GPU code path "launches" a kernel. Each
// must compute, element by element, exactly what its CUDA twin and Infer
// compute.

// kernelEmbedPool is bytenet_embed_pool: p[i*Embed+d] is the mean of
// E[x[i*lpad+t]*Embed+d] over t < lens[i], zeros for an empty input.
func kernelEmbedPool(x []byte, lens []int32, E, p []float32, n, lpad int) {
	for idx := range n * Embed {
		i, d := idx/Embed, idx%Embed
		m := int(lens[i])
		row := x[i*lpad:][:m]
		var s float32
		for _, c := range row {
			s += E[int(c)*Embed+d]
		}
		if m > 0 {
			s /= float32(m)
		}
		p[idx] = s
	}
}

// kernelDense is bytenet_dense: out[i*outDim+j] = b[j] + Σ_k
// W[j*inDim+k]·in[i*inDim+k] in increasing k, then ReLU when relu is set.
func kernelDense(in, W, b, out []float32, n, inDim, outDim int, withReLU bool) {
	for idx := range n * outDim {
		i, j := idx/outDim, idx%outDim
		w := W[j*inDim:][:inDim]
		v := in[i*inDim:][:inDim]
		a := b[j]
		for k := range inDim {
			a += float32(w[k] * v[k])
		}
		if withReLU {
			a = relu(a)
		}
		out[idx] = a
	}
}

// kernelStep is bytenet_step: every (i, j) picks item i's printable byte c
// with the highest o (the lowest on a tie) and computes hn[i*Hidden+j];
// j == 0 writes c to cont[i*ContLen+step]. The pick is the same for every
// j of an item, so it is made once per item here (each GPU thread makes
// it again).
func kernelStep(o, h, E, WH, WX, BH, hn []float32, cont []byte, n, step int) {
	for i := range n {
		c := argmax(o[i*Vocab+PrintLo:][:PrintHi-PrintLo+1], PrintLo)
		hi := h[i*Hidden:][:Hidden]
		e := E[c*Embed:][:Embed]
		for j := range Hidden {
			wh := WH[j*Hidden:][:Hidden]
			a := BH[j]
			for k := range Hidden {
				a += float32(wh[k] * hi[k])
			}
			wx := WX[j*Embed:][:Embed]
			for k := range Embed {
				a += float32(wx[k] * e[k])
			}
			hn[i*Hidden+j] = relu(a)
		}
		cont[i*ContLen+step] = byte(c)
	}
}
